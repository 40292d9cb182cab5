"""The search's answer at the target budget, its maths only (no store, no Ray): loss-vs-compute curves
(`extrapolate`), which evidence a prediction rests on (`evidence`), the backtest that picks the predictor
(`backtest`), calibrated bands (`calibration`), the prediction at T and the front there (`target`),
multi-objective successive halving (`promotion`) and the rung decision built on it (`rung_decision`), Pareto
fronts and hypervolume (`pareto`)."""

from .calibration import BAND_LEVEL
from .target import Answer, Prediction, answer_at_target, at_target, front_at_target, predict_search

__all__ = ["BAND_LEVEL", "Answer", "Prediction", "answer_at_target", "at_target", "front_at_target", "predict_search"]
