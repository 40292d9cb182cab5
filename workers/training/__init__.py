"""The iso-FLOP trainer every run uses, proxy trial or pretraining: the steps a budget buys and budget ladders
(`plans`), a run's settings (`config`), learning-rate schedules (`schedules`), the training loop (`train`), what it
reports (`records`) and its checkpoints (`checkpoints`)."""

from .config import OptimConfig, RunConfig
from .plans import InfeasibleBudget, LadderConfig, plan_budget, plan_ladder
from .records import CurvePoint, RungRecord
from .train import train

__all__ = [
    "CurvePoint",
    "InfeasibleBudget",
    "LadderConfig",
    "OptimConfig",
    "RunConfig",
    "RungRecord",
    "plan_budget",
    "plan_ladder",
    "train",
]
