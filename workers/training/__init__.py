"""The iso-FLOP trainer every run uses, proxy trial or pretraining: the steps a budget buys and budget ladders
(`plans`), learning-rate schedules (`schedules`), the training loop (`train`) and its checkpoints
(`checkpoints`)."""

from .plans import InfeasibleBudget, LadderConfig, plan_budget, plan_ladder
from .train import OptimConfig, RunConfig, train

__all__ = ["InfeasibleBudget", "LadderConfig", "OptimConfig", "RunConfig", "plan_budget", "plan_ladder", "train"]
