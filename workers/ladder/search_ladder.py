"""The ladder a search's trials climb, resolved from what the user asked: its kind, the rungs laid out by cost, the
target T, how replicas narrow, and the plan every trial receives (`SearchLadder`, built by `resolve_ladder`).

What a user asks lives in `nas.space.budget.Budget` (the command line's options); everything that follows from it
is resolved here once, so that the search, its plan, its answer, the export and the dashboard read one ladder:

- the kind: `replica` (every rung a narrower replica on the target's path), `budget` (the config itself, one run
  branched at each rung) or `single` (one budget, no ladder: fewer than two rungs asked);
- the layout (`workers.ladder.layout.choose_layout`): the rungs asked, or every config once at the top rung where a
  replica ladder would save no compute;
- T: asked, or `DEFAULT_TARGET_RATIO` x the top rung, the furthest `make fidelity` checks a prediction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .layout import AnchorPlan, Layout, LevelPlan, choose_layout, plan_anchors, plan_level
from .narrowing import Narrowing
from .plans import RungSpacing
from .replica import rung_budgets
from .trial_plan import LadderKind, LadderPlan

__all__ = ["DEFAULT_TARGET_RATIO", "ResolvedKind", "SearchLadder", "resolve_ladder"]

DEFAULT_TARGET_RATIO = 10.0  # T / top rung when T is not asked: the furthest `make fidelity` checks a prediction
ResolvedKind = Literal["replica", "budget", "single"]


@dataclass(frozen=True)
class SearchLadder:
    """The resolved ladder (module docstring): its `kind`, the `layout` its trials climb, the target T, the
    narrowing of replica rungs, and the spacing that was asked (`asked`: rungs and eta)."""

    kind: ResolvedKind
    layout: Layout
    target_flops: float
    narrowing: Narrowing
    asked: RungSpacing

    @property
    def is_replica(self) -> bool:
        """Whether every rung trains a replica (each its own run)."""
        return self.kind == "replica"

    @property
    def top_flops(self) -> float:
        """The budget of the top rung the trials climb to."""
        return self.layout.top_flops

    @property
    def target_ratio(self) -> float:
        """T over the top rung: how far the search extrapolates."""
        return self.target_flops / self.top_flops

    @property
    def trial_plan(self) -> LadderPlan:
        """The plan every trial receives: replica rungs as the layout lays them out, the config itself on a budget
        ladder up to the top rung, or (a single budget) the config at it."""
        if self.kind == "single":
            return LadderPlan(self.top_flops, target_flops=self.target_flops)
        spacing = RungSpacing(rungs=self.layout.rungs, eta=self.layout.eta)
        if self.kind == "budget":
            return LadderPlan(self.top_flops, spacing, (), self.target_flops, self.narrowing)
        replicas = tuple(rung_budgets(self.layout.lowest_flops, spacing))
        return LadderPlan(self.top_flops, spacing, replicas, self.target_flops, self.narrowing)

    def replicas_at(self, flops: tuple[float, ...], narrowing: Narrowing | None = None) -> LadderPlan:
        """A plan of replica rungs at `flops` (lowest first) on the target's path, narrowed as `narrowing` says
        (default: as the search's rungs): what an anchor, or a level rung, trains."""
        spacing = RungSpacing(rungs=len(flops), eta=self.layout.eta)
        return LadderPlan(flops[-1], spacing, flops, self.target_flops, narrowing or self.narrowing)

    @property
    def level_narrowing(self) -> Narrowing:
        """How the level rungs narrow: the head count kept, no floor but the narrowest width, so that they stay on
        the target's path down to the level budgets (`workers.ladder.layout.LEVEL_SHARES`)."""
        return Narrowing(min_width=self.narrowing.min_width, min_share=0.0, keep="heads")

    def level_plan(self, trials: int, requested: int, share: float) -> LevelPlan:
        """The level configs `trials` trials' search measures (`workers.ladder.layout.plan_level`): only on a
        replica ladder whose every config trains once at its top rung."""
        if not self.is_replica:
            return LevelPlan(0, (), "no level curve: the rungs are not replicas on the target's path")
        return plan_level(trials * self.cost_per_config(), self.top_flops, self.layout.rungs, requested, share)

    def cost_per_config(self) -> float:
        """Training FLOPs of one config's rungs (`Layout.cost_per_config`)."""
        return self.layout.cost_per_config(self.is_replica)

    def anchor_plan(self, trials: int, requested: int, share: float, anchor_flops: float | None) -> AnchorPlan:
        """The anchors `trials` trials' search trains: `requested` of them within `share` of the trials' compute
        (`workers.ladder.layout.plan_anchors`)."""
        cost = trials * self.cost_per_config()
        return plan_anchors(cost, self.top_flops, self.target_flops, requested, share, anchor_flops)


def resolve_ladder(
    trial_flops: float,
    spacing: RungSpacing,
    kind: LadderKind,
    narrowing: Narrowing,
    *,
    target_flops: float | None = None,
    as_asked: bool = False,
) -> SearchLadder:
    """The ladder of a search asked for `spacing` (rungs from `trial_flops` at ratio eta) of `kind` (module
    docstring); `as_asked`: keep the rungs asked even where a replica ladder saves nothing."""
    resolved: ResolvedKind = "single" if spacing.rungs < 2 else kind
    layout = choose_layout(trial_flops, spacing.rungs, spacing.eta, kind == "replica", given=as_asked)
    top = trial_flops * spacing.eta ** (spacing.rungs - 1)
    target = target_flops if target_flops is not None else DEFAULT_TARGET_RATIO * top
    return SearchLadder(resolved, layout, target, narrowing, spacing)
