"""Learning-rate schedules: warmup-stable-decay (the default) or cosine, for a run and for a budget ladder.

The schedule is the target run's: a search records it and every run standing for that target (replica
rungs, budget ladders, repeats, the benchmark's truth runs, `nas pretrain`) follows the same shape with
the same shares, because at proxy horizons the shape alone moves a loss, differently per family (docs/design.md §5,
"One schedule").

- `wsd` (Hägele et al., arXiv 2405.18392): a linear warm-up over `warmup` x the steps of the run (of its
  lowest rung, on a ladder), then lr, then a linear decay to lr x min_lr_ratio over the last `cooldown`
  share of the run's steps. On a budget ladder (rungs C_0 < ... < C_k, `workers.ladder.plans.plan_ladder`) the
  main run decays at the top rung, and each lower rung's loss is measured on a branch that decays the
  same way over its own last `cooldown` share (`workers.training.train`), so every rung's loss is at the same
  point of its own schedule. A single run is a ladder of one rung.
- `cosine`: a linear warm-up over `warmup` x steps, then a cosine decay to lr x min_lr_ratio at the last
  step. It has no stable phase to branch from, so a budget ladder cannot follow it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

from ..ladder.plans import Rung

__all__ = ["SCHEDULES", "Schedule", "ScheduleKind", "cosine_learning_rate", "wsd_learning_rate"]

ScheduleKind = Literal["wsd", "cosine"]
SCHEDULES: tuple[str, ...] = get_args(ScheduleKind)


def cosine_learning_rate(step: int, steps: int, lr: float, min_lr_ratio: float, warmup: float) -> float:
    """Linear warm-up over warmup x steps, then cosine decay from lr to lr x min_lr_ratio."""
    warm = max(1, round(warmup * steps)) if warmup > 0 else 0
    if step < warm:
        return lr * (step + 1) / warm
    progress = (step - warm) / max(1, steps - warm)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return lr * (min_lr_ratio + (1 - min_lr_ratio) * cosine)


def wsd_learning_rate(
    step: int, lr: float, min_lr_ratio: float, warmup_steps: int, decay_start: int, decay_end: int
) -> float:
    """The learning rate of `step`: linear warm-up to lr over `warmup_steps`, then lr, then a linear
    decay from `decay_start` reaching lr x min_lr_ratio at the last step before `decay_end` (the step
    count of the rung whose schedule this is)."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if step < decay_start or decay_end <= decay_start:
        return lr
    progress = min(1.0, (step + 1 - decay_start) / (decay_end - decay_start))
    return lr * (1 - (1 - min_lr_ratio) * progress)


@dataclass(frozen=True)
class Schedule:
    """The learning rate of a run of `steps` steps whose rungs are `rungs` (one rung for a plain run, the
    ladder's for a budget ladder): `kind` with its warm-up share and, for wsd, its cooldown share."""

    kind: ScheduleKind
    lr: float
    min_lr_ratio: float
    warmup: float  # share of the steps (of the lowest rung, on a ladder) spent warming up
    steps: int
    rungs: list[Rung]
    cooldown: float  # wsd: share of each rung's steps spent decaying

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise ValueError(f"schedule: must be one of {', '.join(SCHEDULES)} (got {self.kind!r})")
        if self.kind == "cosine" and len(self.rungs) > 1:
            raise ValueError(
                "schedule: a budget ladder branches each rung's cooldown off one stable run, which a cosine "
                "schedule has not: use schedule 'wsd' (or replica rungs)"
            )

    @property
    def warmup_steps(self) -> int:
        return max(1, round(self.warmup * self.rungs[0].steps)) if self.warmup > 0 else 0

    def at(self, step: int, rung: Rung | None = None) -> float:
        """At `step` of the main run, or of the cooldown branch of `rung`."""
        if self.kind == "cosine":
            return cosine_learning_rate(step, self.steps, self.lr, self.min_lr_ratio, self.warmup)
        rung = rung or self.rungs[-1]
        return wsd_learning_rate(
            step, self.lr, self.min_lr_ratio, self.warmup_steps, rung.decay_start(self.cooldown), rung.steps
        )

    def rung_branching_at(self, step: int, done: int) -> Rung | None:
        """The next lower rung not yet measured, if its cooldown branches off the main run at `step` (or
        earlier: two rungs whose steps round to the same decay start branch at the same step)."""
        if done >= len(self.rungs) - 1:
            return None
        rung = self.rungs[done]
        return rung if rung.decay_start(self.cooldown) <= step else None
