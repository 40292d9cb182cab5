"""The iso-FLOP trainer every run uses, proxy trial or pretraining (the steps a budget buys and budget ladders are
planned in `workers.ladder.plans`): a run's settings (`config`), learning-rate schedules (`schedules`), the training
loop (`train`), what it reports (`records`) and its checkpoints (`checkpoints`); the loop is
`workers.training.train.train` (named by its module: the package's attribute `train` is that module)."""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .config import OptimConfig, RunConfig
    from .records import CurvePoint, RungRecord

__all__ = [
    "CurvePoint",
    "OptimConfig",
    "RunConfig",
    "RungRecord",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "OptimConfig": ".config",
        "RunConfig": ".config",
        "CurvePoint": ".records",
        "RungRecord": ".records",
    },
)
