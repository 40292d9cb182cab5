"""What the Target budget page says, apart from drawing it: why a search has no front at its target, the
ladder's caption, the targets T may be moved to, and what a moved T means."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nas.answer.backtest import Backtest
from nas.answer.calibration import Calibration
from nas.answer.extrapolate import NONE
from nas.answer.target import BAND_LEVEL
from nas.space.budget import VALIDATED_TARGET_RATIO, Budget


def no_target_reason(budget: Budget | str, rung_rows: Sequence, predictions: dict) -> str | None:
    """Why the search has no front at its target budget, in one line; None when it has one.

    No rung rows: a search that measured none. Rungs but no fitted trial (every prediction of
    group NONE): too few trials measured at two or more rungs to fit loss vs compute (e.g. `--rungs 1`).
    """
    if isinstance(budget, str):
        return f"no prediction at the target budget for this search: {budget}"
    if not rung_rows:
        return (
            "no rungs stored for this search (it predates budget ladders): no prediction at the target budget; "
            "the Pareto front page shows its measured front"
        )
    if not any(p.group not in (NONE, "-") for p in predictions.values()) and not _top_rung_only(budget):
        return (
            f"too few rungs to fit loss vs compute ({len(rung_rows)} rung measurements, ladder of "
            f"{budget.ladder.layout.rungs}): "
            "extrapolating to the target needs trials measured at two or more rungs (`nas search --rungs 3`)"
        )
    return None


def _top_rung_only(budget: Budget) -> bool:
    """Whether the search trained every config once at its top rung (the layout chosen by cost)."""
    ladder = budget.ladder
    return ladder.kind != "single" and ladder.layout.rungs == 1


def ladder_caption(budget: Budget, check: Backtest | None = None, calibration: Calibration | None = None) -> str:
    """The target T, the ladder (its kind, its rungs' budgets and eta), the predictor and the bands in one line."""
    ladder = budget.ladder
    layout = ladder.layout
    budgets = tuple(layout.lowest_flops * layout.eta**r for r in range(layout.rungs))
    what = "replicas at the target's tokens per parameter" if ladder.is_replica else "the config itself"
    loss_at_t = (
        "each trial's loss: its top rung's, not carried to T (one rung: no curve to carry it), the top rung's "
        "measured bias taken out; the ranking is the answer"
        if _top_rung_only(budget)
        else "each trial's loss at T: its highest rung carried on the search's curve L = E + A C^-alpha (alpha, E "
        "shared), or all its rungs weighted by their reliability where the backtest favours that"
    )
    caption = (
        f"target T = {ladder.target_flops:.3g} training FLOPs ({ladder.target_ratio:.3g} x the top rung) · "
        f"{budget.ladder_kind} ladder ({what}): {len(budgets)} rung{'s' if len(budgets) > 1 else ''}, eta = "
        f"{layout.eta:g} ({', '.join(f'{b:.3g}' for b in budgets)} training FLOPs; {layout.reason}) · "
        f"{loss_at_t}; error bars: the {BAND_LEVEL:.0%} band, calibrated on the backtest"
    )
    if check is not None:
        caption += f" · {check.describe()}"
    if calibration is not None:
        caption += f" · {calibration.describe()}"
    if budget.beyond_validated:
        caption += f" · warning: {budget.beyond_validated}"
    return caption


def target_options(budget: Budget, steps: int = 9) -> list[float]:
    """The targets a user may move T to: 2x to VALIDATED_TARGET_RATIO x the top rung (the range
    `make fidelity` checked), log-spaced, and the search's own T wherever it lies."""
    top = budget.ladder.top_flops
    grid = np.geomspace(2.0 * top, VALIDATED_TARGET_RATIO * top, steps)
    return sorted({float(f"{t:.3g}") for t in grid} | {budget.ladder.target_flops})


def moved_target_note(budget: Budget) -> str:
    """What a moved T means: on a budget ladder, the same configs at more compute; on a replica ladder,
    each config scaled along the path its replicas measured."""
    target = budget.ladder.target_flops
    if budget.ladder.is_replica:
        return (
            f"T moved to {target:.3g}: on a replica ladder each trial's curve runs along its target's tokens "
            "per parameter, so the loss at this T is that of the config with its width scaled to spend T at that "
            "ratio; the configs themselves were sized for the search's own T"
        )
    return f"T moved to {target:.3g}: each config's predicted loss when trained iso-FLOP with this budget"
