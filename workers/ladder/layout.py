"""Where a search spends its compute: the rungs it trains, and the share it keeps for anchors.

A replica rung is its own run from scratch, so successive halving over R replica rungs at ratio eta, each rung
keeping the best 1/eta of the one below, costs per config

    C + (1/eta) eta C + (1/eta^2) eta^2 C + ... = R C

against eta^(R-1) C for training every config once at the top rung. Promotion only saves compute when
R < eta^(R-1) (2 rungs need eta > 2; 3 rungs eta > sqrt(3)), and it then ranks most configs by a lower rung,
which orders them worse than the top rung does (`benchmarks/results/fidelity.json`). So a search whose ladder
would save less than `MIN_SAVING` of the top rung's cost trains every config once at the top rung instead (one
rung, the same compute); a budget ladder, one run passing every rung, costs its top rung either way and keeps its
rungs. The user's `--rungs` / `--eta` force a ladder as given.

Anchors (`nas.answer.discrepancy`) take a further share of the search's compute: `anchor_share` of what the
trials cost, spent on `anchors` runs at `anchor_flops` (default `ANCHOR_SHARE_OF_T` x T), no fewer than two (a
slope needs two points); when two do not fit, the search has none and says why.

The level at T (`nas.answer.level`) takes another: where every config trains once at the top rung, `configs` of
them (default 3) are also trained at `LEVEL_SHARES` of the top rung (a quarter and a third) on the target's path,
within `level_share` of the trials' compute (default 5%); as many as fit, no fewer than two (a shared floor needs
two curves), else none, and the search says why and what would buy it (`benchmarks/README.md` says how the two
budgets were chosen).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "ANCHOR_SHARE_OF_T",
    "LEVEL_SHARES",
    "MIN_LEVEL_CONFIGS",
    "MIN_SAVING",
    "AnchorPlan",
    "Layout",
    "LevelPlan",
    "choose_layout",
    "plan_anchors",
    "plan_level",
]

MIN_SAVING = 0.25  # a ladder must save at least this share of the top rung's cost to be worth its weaker rankings
ANCHOR_SHARE_OF_T = 1 / 3  # the default anchor budget, as a share of T: a wider replica, nearer the target's shape
LEVEL_SHARES = (1 / 4, 1 / 3)  # the level rungs' budgets, as shares of the top rung
MIN_LEVEL_CONFIGS = 2  # a shared floor needs two curves


def _num(x: float) -> str:
    return f"{x:.3g}"


@dataclass(frozen=True)
class Layout:
    """The rungs a search trains: `rungs` budgets from `lowest_flops` at ratio `eta`, and why."""

    rungs: int
    eta: float
    lowest_flops: float
    reason: str

    @property
    def top_flops(self) -> float:
        return self.lowest_flops * self.eta ** (self.rungs - 1)

    def cost_per_config(self, replica: bool = True) -> float:
        """Training FLOPs per config: R C on replica rungs under successive halving at ratio eta, the top rung's
        budget on a budget ladder (one run)."""
        return self.rungs * self.lowest_flops if replica else self.top_flops


def choose_layout(trial_flops: float, rungs: int, eta: float, replica: bool, given: bool) -> Layout:
    """The layout of a search asked for `rungs` rungs at ratio `eta` from `trial_flops` (module docstring)."""
    ladder = Layout(rungs, eta, trial_flops, "")
    if rungs < 2:
        return Layout(1, eta, trial_flops, "one rung: every config trained once")
    if given:
        return Layout(rungs, eta, trial_flops, f"{rungs} rungs at eta {eta:g}, as asked (--rungs/--eta)")
    if not replica:
        return Layout(
            rungs, eta, trial_flops, f"{rungs} rungs at eta {eta:g}: a budget ladder passes every rung in one run"
        )
    promoted, top_only = ladder.cost_per_config(), ladder.top_flops
    saving = 1.0 - promoted / top_only
    if saving >= MIN_SAVING:
        return Layout(
            rungs,
            eta,
            trial_flops,
            f"{rungs} rungs at eta {eta:g}: promotion costs {rungs} x {_num(trial_flops)} per config against "
            f"{_num(top_only)} at the top rung, a saving of {saving:.0%}",
        )
    return Layout(
        1,
        eta,
        ladder.top_flops,
        f"every config once at the top rung {_num(top_only)}: {rungs} replica rungs at eta {eta:g} would cost "
        f"{rungs} x {_num(trial_flops)} per config, {'no less' if saving <= 0 else f'only {saving:.0%} less'}, "
        "and rank most configs by a lower rung",
    )


@dataclass(frozen=True)
class AnchorPlan:
    """How many anchors a search trains (0: none, and why), each at `flops`."""

    count: int
    flops: float
    reason: str

    @property
    def cost(self) -> float:
        return self.count * self.flops


def plan_anchors(trials_cost: float, top_flops: float, target_flops: float, requested: int, share: float,
                 anchor_flops: float | None = None) -> AnchorPlan:  # fmt: skip
    """`requested` anchors at `anchor_flops` (default ANCHOR_SHARE_OF_T x T), as many as `share` x `trials_cost`
    affords; none below two, nor when the anchor budget is not above the top rung."""
    flops = anchor_flops if anchor_flops is not None else ANCHOR_SHARE_OF_T * target_flops
    if requested < 2:
        return AnchorPlan(0, flops, "none asked for (--anchors below 2)")
    if flops <= top_flops * (1 + 1e-9):
        return AnchorPlan(
            0, flops, f"no anchors: their budget {_num(flops)} is not above the top rung {_num(top_flops)}"
        )
    affordable = math.floor(share * trials_cost / flops + 1e-9)
    count = min(requested, affordable)
    if count < 2:
        return AnchorPlan(
            0,
            flops,
            f"no anchors: two at {_num(flops)} cost {_num(2 * flops)}, more than --anchor-share {share:g} of the "
            f"trials' {_num(trials_cost)}",
        )
    return AnchorPlan(
        count, flops, f"{count} anchors at {_num(flops)} ({count * flops / trials_cost:.0%} of the trials' compute)"
    )


@dataclass(frozen=True)
class LevelPlan:
    """How many configs a search measures for its level at T (0: none, and why), each at `budgets` below the top
    rung."""

    count: int
    budgets: tuple[float, ...]
    reason: str

    @property
    def cost(self) -> float:
        return self.count * sum(self.budgets)


def plan_level(trials_cost: float, top_flops: float, rungs: int, requested: int, share: float) -> LevelPlan:
    """`requested` level configs at LEVEL_SHARES of the top rung, as many as `share` x `trials_cost` affords (module
    docstring); none on a ladder of several rungs (its own rungs carry the curve) or below MIN_LEVEL_CONFIGS."""
    budgets = tuple(top_flops * f for f in LEVEL_SHARES)
    each = sum(budgets)
    if rungs > 1:
        return LevelPlan(0, budgets, "the ladder's own rungs carry the curve to T")
    if requested < MIN_LEVEL_CONFIGS:
        return LevelPlan(0, budgets, f"none asked for (--level-configs below {MIN_LEVEL_CONFIGS})")
    count = min(requested, math.floor(share * trials_cost / each + 1e-9))
    where = " and ".join(_num(b) for b in budgets)
    if count < MIN_LEVEL_CONFIGS:
        needed = MIN_LEVEL_CONFIGS * each / trials_cost
        return LevelPlan(
            0,
            budgets,
            f"no level at T: {MIN_LEVEL_CONFIGS} configs at {where} cost {needed:.1%} of the trials' "
            f"{_num(trials_cost)}, above --level-share {share:g} (raise it to {math.ceil(needed * 100) / 100:g})",
        )
    return LevelPlan(
        count,
        budgets,
        f"the level at T from {count} configs also trained at {where} ({count * each / trials_cost:.1%} of the "
        "trials' compute)",
    )
