"""Measured cost beside counted cost: the x-axes of the dashboard's fronts, and their ratio per config.

Counted cost is the search's objective, executed forward FLOPs per token (`search_spaces` counts them
factor by factor). Measured cost is the training step's seconds per token on the worker that ran the
trial (the store records no device name, so trials run on different machines compare their machines
too):

    seconds/token = step seconds / tokens trained in steps
                  = step_time_share * wall_time_s / (tokens_seen * (training_flops + branch_flops) / training_flops)

Step seconds (`TrialRow.step_time_share` x wall time) time forward, backward, clip and optimiser
steps only, not data loading, evaluation or the width probe that `tokens_per_s` (tokens over the whole
trial's wall time) also pays for. A ladder run's step seconds include its cooldown branches, so their
tokens, `branch_flops` at the run's FLOPs per token, are counted too.

The ratio of a config is (seconds/token) / (FLOPs/token) over its study's median: 1 runs as fast per
counted FLOP as the study's middle config, 2 takes twice the time its FLOPs say (e.g. skipped
Mixture-of-Depths FLOPs that save no time on a CPU).

Two more counted axes price inference rather than training (`nas.space.objectives`, at each config's seq_len):
KV-cache bytes per token and decode FLOPs per token.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nas.space.objectives import decode_flops_of, kv_bytes_of
from workers.status import PENDING


def _positive(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def seconds_per_token(row) -> float | None:
    """The training step's measured seconds per token (see the module docstring), or None if not measured.

    None for a trial that trained no token (failed, infeasible, still running) or whose step time,
    wall time or training FLOPs were not stored.
    """
    share, wall, tokens, flops = row.step_time_share, row.wall_time_s, row.tokens_seen, row.training_flops
    if not (_positive(share) and _positive(wall) and _positive(tokens) and _positive(flops)):
        return None
    branch = row.branch_flops if _positive(row.branch_flops) else 0.0
    return share * wall / (tokens * (flops + branch) / flops)


@dataclass(frozen=True)
class CostAxis:
    """One choice of the fronts' x-axis: `of(row)` is a row's cost on it (None: not drawn there)."""

    name: str  # the widget's option
    title: str  # the axis title
    short: str  # in hover texts and captions
    of: Callable[[Any], float | None]


COUNTED = CostAxis(
    "executed FLOPs / token (counted)",
    "executed forward FLOPs per token (counted)",
    "executed FLOPs/token",
    lambda row: row.executed_flops_per_token,
)
MEASURED = CostAxis(
    "measured seconds / token",
    "measured training-step seconds per token (on the worker that ran it)",
    "step s/token",
    seconds_per_token,
)
KV_BYTES = CostAxis(
    "KV-cache bytes / token",
    "KV-cache bytes per context token (counted at each config's seq_len)",
    "KV bytes/token",
    kv_bytes_of,
)
DECODE = CostAxis(
    "decode FLOPs / token",
    "decode FLOPs per generated token after seq_len cached ones (counted)",
    "decode FLOPs/token",
    decode_flops_of,
)
AXES = {axis.name: axis for axis in (COUNTED, KV_BYTES, DECODE, MEASURED)}
AXIS_HELP = (
    "counted: executed forward FLOPs per token, the search's objective. KV-cache bytes and decode FLOPs per "
    "token: the cost of generating, counted at each config's seq_len (MoD's skipped positions hold no key). "
    "measured: seconds per token inside the training steps (forward, backward, optimiser; not data loading or "
    "evaluation), timed on the worker that ran the trial (the store records no device). The front is "
    "recomputed on the chosen axis: the trials no other beats on both loss and that cost."
)


def unmeasured(rows: Sequence) -> list:
    """The finished trials (not pending or running) that have no measured speed."""
    return [r for r in rows if r.status not in PENDING and seconds_per_token(r) is None]


def unmeasured_note(rows: Sequence) -> str | None:
    """'N trials without a measured speed are not shown' with their statuses, or None when all have one."""
    missing = unmeasured(rows)
    if not missing:
        return None
    statuses: dict[str, int] = {}
    for r in missing:
        statuses[str(r.status)] = statuses.get(str(r.status), 0) + 1
    counts = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()))
    verb = "trial without a measured speed is" if len(missing) == 1 else "trials without a measured speed are"
    return f"{len(missing)} {verb} not shown on the measured axis ({counts})"


def cost_ratios(rows: Sequence) -> dict[int, float]:
    """trial id -> (seconds/token) / (FLOPs/token) over the median of that ratio among `rows` (one study).

    Only trials with both costs measured are in it; the median of the returned values is 1.
    """
    raw = {}
    for r in rows:
        seconds, flops = seconds_per_token(r), r.executed_flops_per_token
        if seconds is not None and _positive(flops):
            raw[r.id] = seconds / flops
    if not raw:
        return {}
    median = statistics.median(raw.values())
    return {trial_id: value / median for trial_id, value in raw.items()}
