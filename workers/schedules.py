"""Learning-rate schedules of a training run: cosine for a single budget, warmup-stable-decay for a ladder.

A single-budget run warms up linearly over `warmup` x steps, then decays by a cosine to
lr x min_lr_ratio at its last step. A ladder run (rungs C_0 < ... < C_k, `workers.budget.plan_ladder`)
warms up over `warmup` x the lowest rung's steps, holds lr, and decays linearly over the last
`cooldown` share of the top rung's steps; each lower rung's loss is measured on a branch that decays
the same way over its own last `cooldown` share (`workers.train`), so every rung's loss is at the same
point of its own schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .budget import Rung

__all__ = ["Schedule", "cosine_learning_rate", "wsd_learning_rate"]


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
    """The learning rate of a run of `steps` steps: cosine without `rungs`, else warmup-stable-decay with
    the warm-up sized by the lowest rung and the decay at the top rung's end."""

    lr: float
    min_lr_ratio: float
    warmup: float  # share of the steps (of the lowest rung, on a ladder) spent warming up
    steps: int
    rungs: list[Rung]
    cooldown: float

    @property
    def warmup_steps(self) -> int:
        return max(1, round(self.warmup * self.rungs[0].steps)) if self.warmup > 0 else 0

    def at(self, step: int, rung: Rung | None = None) -> float:
        """At `step` of the main run, or of the cooldown branch of `rung`."""
        if not self.rungs:
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
