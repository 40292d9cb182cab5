"""Which predictor a search answers with at the target, decided on its own rungs without looking at the target.

For every trial with at least two rungs, hold out its highest rung and predict it from the study without that
point (`nas.answer.extrapolate.fit_study`, the rungs' reliability measured again without it, `nas.answer.evidence`):

- by `TOP_RUNG`: the trial's rung below carried to the held-out budget on the study's curve, and
- by `WEIGHTED_FIT`: every rung below, weighted by its reliability.

Each predictor is scored by its pairwise ranking agreement with the held-out losses, over the pairs of trials
whose held-out rungs have the same budget (the only pairs whose losses are comparable): tau = (concordant -
discordant) / pairs, Kendall's tau-a on those pairs. The weighted fit is chosen only when it ranks strictly
better: the highest rung is the default, and below `MIN_PAIRS` comparable pairs there is no backtest (the
search says so). The chosen predictor's held-out errors are what its bands are calibrated on
(`nas.answer.calibration`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .evidence import (
    MIN_PAIRS,
    TOP_RUNG,
    WEIGHTED_FIT,
    Predictor,
    pairwise_tau,
    predict_at,
    rung_means,
    rung_reliability,
)
from .extrapolate import RungPoint, budget_key, fit_study

__all__ = ["Backtest", "HeldOut", "backtest", "held_out_predictions", "pairwise_tau"]


@dataclass(frozen=True)
class HeldOut:
    """One trial's highest rung (budget `to_flops`, mean loss `observed`) predicted by each predictor from the
    study without it; `from_flops` is the highest rung the predictions rest on (the rung below)."""

    trial: int
    from_flops: float
    to_flops: float
    observed: float
    predicted: Mapping[str, float]

    def error(self, predictor: Predictor) -> float:
        return self.predicted[predictor] - self.observed


@dataclass(frozen=True)
class Backtest:
    """The predictor chosen, each predictor's held-out ranking agreement and mean absolute error, how many trials
    and comparable pairs the backtest saw (taus are None without a backtest), and the held-out rungs."""

    chosen: Predictor
    fit_tau: float | None
    carry_tau: float | None
    fit_mae: float | None
    carry_mae: float | None
    trials: int
    pairs: int
    held_out: tuple[HeldOut, ...] = ()

    @property
    def checked(self) -> bool:
        return self.fit_tau is not None

    def describe(self) -> str:
        """One line for `nas show`, the dashboard and the export."""
        if not self.checked:
            return (
                f"predictor: {self.chosen} (the default: {self.pairs} comparable backtest pairs, "
                f"the weighted fit needs {MIN_PAIRS} to be checked)"
            )
        return (
            f"predictor: {self.chosen}, by backtest on {self.trials} trials ({self.pairs} pairs) predicting each "
            f"highest rung from the rungs below: top rung carried tau {self.carry_tau:+.2f} "
            f"(MAE {self.carry_mae:.3f} nats), weighted fit tau {self.fit_tau:+.2f} (MAE {self.fit_mae:.3f})"
        )


def held_out_predictions(points: Sequence[RungPoint]) -> list[HeldOut]:
    """Every multi-rung trial's highest rung, predicted by both predictors from the study without it."""
    means = rung_means(points)
    out = []
    for trial in sorted(t for t, r in means.items() if len(r) >= 2):
        budgets = sorted(means[trial])
        top, below = budgets[-1], budgets[-2]
        rest = [p for p in points if not (p.trial == trial and budget_key(p.flops) == top)]
        try:
            fit = fit_study(rest)
        except ValueError:
            continue
        reliability = rung_reliability(rest)
        predicted = {
            predictor: predict_at(fit, predictor, rest, top, reliability).get(trial, math.inf)
            for predictor in (TOP_RUNG, WEIGHTED_FIT)
        }
        out.append(HeldOut(trial, below, top, means[trial][top], predicted))
    return out


def backtest(points: Sequence[RungPoint]) -> Backtest:
    """The Backtest of the study's rung points (module docstring)."""
    held = [h for h in held_out_predictions(points) if all(math.isfinite(v) for v in h.predicted.values())]
    observed = {h.trial: h.observed for h in held}
    groups = {h.trial: h.to_flops for h in held}
    fit_tau, pairs = pairwise_tau({h.trial: h.predicted[WEIGHTED_FIT] for h in held}, observed, groups)
    carry_tau, _ = pairwise_tau({h.trial: h.predicted[TOP_RUNG] for h in held}, observed, groups)
    if pairs < MIN_PAIRS or fit_tau is None or carry_tau is None:
        return Backtest(TOP_RUNG, None, None, None, None, len(held), pairs, tuple(held))
    return Backtest(
        WEIGHTED_FIT if fit_tau > carry_tau else TOP_RUNG,
        fit_tau,
        carry_tau,
        float(np.mean([abs(h.error(WEIGHTED_FIT)) for h in held])),
        float(np.mean([abs(h.error(TOP_RUNG)) for h in held])),
        len(held),
        pairs,
        tuple(held),
    )
