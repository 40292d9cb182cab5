"""The replica ladder, in one place and without torch: what a rung trains and the steps a budget buys (`plans`),
how a replica narrows its target (`narrowing`) and is planned on the target's path (`replica`), where a search
spends its compute (`layout`: the rungs chosen by cost, the anchors' and the level's share), and the plan a trial
receives (`trial_plan`). The search (`nas`) plans with it; the trial (`workers.trial`) and the trainer
(`workers.training`) carry the plans out. A replica's learning rate is the target's: `replica.replica_arch` trains it
under `completep` with the target as base shape, whose per-tensor rules are `search_spaces.residual_lm.parametrization`.
"""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .layout import AnchorPlan, Layout, choose_layout, plan_anchors
    from .narrowing import KEEP_HEADS, Narrowing
    from .plans import BudgetPlan, InfeasibleBudget, Rung, RungSpacing, plan_budget, plan_ladder
    from .replica import Replica, TargetPath, plan_replica, replica_arch, replica_widths, rung_budgets, target_path
    from .trial_plan import LadderKind, LadderPlan

__all__ = [
    "KEEP_HEADS",
    "AnchorPlan",
    "BudgetPlan",
    "InfeasibleBudget",
    "LadderKind",
    "LadderPlan",
    "Layout",
    "Narrowing",
    "Replica",
    "Rung",
    "RungSpacing",
    "TargetPath",
    "choose_layout",
    "plan_anchors",
    "plan_budget",
    "plan_ladder",
    "plan_replica",
    "replica_arch",
    "replica_widths",
    "rung_budgets",
    "target_path",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "AnchorPlan": ".layout",
        "Layout": ".layout",
        "choose_layout": ".layout",
        "plan_anchors": ".layout",
        "KEEP_HEADS": ".narrowing",
        "Narrowing": ".narrowing",
        "BudgetPlan": ".plans",
        "InfeasibleBudget": ".plans",
        "Rung": ".plans",
        "RungSpacing": ".plans",
        "plan_budget": ".plans",
        "plan_ladder": ".plans",
        "Replica": ".replica",
        "TargetPath": ".replica",
        "plan_replica": ".replica",
        "replica_arch": ".replica",
        "replica_widths": ".replica",
        "rung_budgets": ".replica",
        "target_path": ".replica",
        "LadderKind": ".trial_plan",
        "LadderPlan": ".trial_plan",
    },
)
