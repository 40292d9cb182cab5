"""The plan a trial receives: which ladder it climbs, at which budgets, narrowed how (`LadderPlan`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .narrowing import DEFAULT_NARROWING, Narrowing
from .plans import RungSpacing

__all__ = ["LadderKind", "LadderPlan"]

LadderKind = Literal["replica", "budget"]  # what a rung trains: a narrower replica, or the config itself


@dataclass(frozen=True)
class LadderPlan:
    """The ladder one trial climbs, as its search planned it:

    - replica rungs (`replica_flops`, lowest first): each rung its own run of a copy of the config narrowed as
      `narrowing` says, on the target's path to `target_flops` (`workers.ladder.replica`);
    - a budget ladder (`spacing`): the config itself, one run to `top_flops` with a cooldown branch at each rung;
    - neither: the config itself at `top_flops` alone.
    """

    top_flops: float
    spacing: RungSpacing | None = None
    replica_flops: tuple[float, ...] = ()
    target_flops: float | None = None
    narrowing: Narrowing = DEFAULT_NARROWING

    def __post_init__(self) -> None:
        if self.replica_flops and self.target_flops is None:
            raise ValueError("replica rungs need the target's training FLOPs (target_flops)")

    @property
    def is_replica(self) -> bool:
        """Whether every rung trains a replica of the config (each its own run)."""
        return bool(self.replica_flops)

    @property
    def rungs(self) -> int:
        """How many rungs the trial may climb."""
        if self.replica_flops:
            return len(self.replica_flops)
        return self.spacing.rungs if self.spacing is not None else 1

    def up_to(self, reached: int) -> LadderPlan:
        """The same ladder up to rung `reached` (1 = the lowest rung alone): what a trial that stopped there ran."""
        if self.spacing is None or reached >= self.rungs:
            return self
        spacing = RungSpacing(rungs=reached, eta=self.spacing.eta)
        if self.replica_flops:
            flops = self.replica_flops[:reached]
            return LadderPlan(flops[-1], spacing, flops, self.target_flops, self.narrowing)
        top = self.top_flops / self.spacing.eta ** (self.spacing.rungs - reached)
        return LadderPlan(top, spacing, (), self.target_flops, self.narrowing)

    @property
    def reports_rungs(self) -> bool:
        """Whether the trial reports rungs to a gate: replica rungs or a budget ladder (a single budget does not)."""
        return self.is_replica or self.spacing is not None
