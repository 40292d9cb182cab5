"""The iso-FLOP trainer every run uses, proxy trial or pretraining: the steps a budget buys and budget ladders
(`plans`), a run's settings (`config`), learning-rate schedules (`schedules`), the training loop (`train`), what it
reports (`records`) and its checkpoints (`checkpoints`); the loop is `workers.training.train.train` (named by its
module: the package's attribute `train` is that module)."""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .config import OptimConfig, RunConfig
    from .plans import InfeasibleBudget, LadderConfig, plan_budget, plan_ladder
    from .records import CurvePoint, RungRecord

__all__ = [
    "CurvePoint",
    "InfeasibleBudget",
    "LadderConfig",
    "OptimConfig",
    "RunConfig",
    "RungRecord",
    "plan_budget",
    "plan_ladder",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "OptimConfig": ".config",
        "RunConfig": ".config",
        "InfeasibleBudget": ".plans",
        "LadderConfig": ".plans",
        "plan_budget": ".plans",
        "plan_ladder": ".plans",
        "CurvePoint": ".records",
        "RungRecord": ".records",
    },
)
