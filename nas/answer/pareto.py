"""Pareto fronts and hypervolume over (validation loss, executed forward FLOPs per token), both minimised.

Only trials whose status is `completed` can be on a front: diverged, infeasible, stopped (partial
loss) and failed trials never are. Hypervolume comes from `moocore` (a maintained C library)
against a stated reference point: loss = ln(vocab) (a uniform predictor; any model worth keeping
beats it) and FLOPs = 1.1 x the largest executed FLOPs per token among the trials considered.
`pareto_rows` takes another cost through `key` (the dashboard's measured seconds per token).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import moocore
import numpy as np

from workers.status import TrialStatus


@dataclass(frozen=True)
class FrontPoint:
    """The least a row needs to be placed on a front: what benchmarks and figures build from tables.

    Store rows (`TrialRow`) carry the same four fields, so either may be passed to the functions here.
    """

    number: int
    val_loss: float | None
    executed_flops_per_token: float | None
    status: str = TrialStatus.COMPLETED


def is_front_candidate(row) -> bool:
    """Completed with a finite loss and finite executed FLOPs: the only rows that may sit on a front.

    A completed trial always has finite FLOPs; requiring them (the dashboard's rule) keeps a NaN or inf
    that reached the store off fronts, hypervolumes and plot axes alike.
    """
    return row.status == TrialStatus.COMPLETED and _finite(row.val_loss) and _finite(row.executed_flops_per_token)


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


def objectives(rows: Sequence) -> np.ndarray:
    """(n, 2) array of (val_loss, executed FLOPs per token) of completed rows with finite values."""
    pts = [(r.val_loss, r.executed_flops_per_token) for r in rows if is_front_candidate(r)]
    return np.array(pts, dtype=float).reshape(-1, 2)


Cost = Callable[[Any], float | None]  # a row's cost objective (the front's x), None where it has none


def _executed(row) -> float | None:
    return row.executed_flops_per_token


def pareto_rows(rows: Sequence, key: Cost | None = None, also: Sequence[Cost] = ()) -> list:
    """The non-dominated completed rows on (val_loss, cost, *also), sorted by cost.

    The cost is `key(row)`, by default executed FLOPs per token (the search's objective); a dashboard
    passes measured seconds per token instead. `also`: further costs minimised beside it (KV bytes per
    token, in a search that minimises them). Rows with a cost that is None or not finite are left out.
    """
    costs = [key or _executed, *also]

    def value(cost: Cost, row) -> float:
        v = cost(row)
        return math.inf if v is None else float(v)

    def x(row) -> float:
        return value(costs[0], row)

    candidates = [r for r in rows if is_front_candidate(r) and all(math.isfinite(value(c, r)) for c in costs)]
    if not candidates:
        return []
    pts = np.array([(r.val_loss, *(value(c, r) for c in costs)) for r in candidates], dtype=float)
    keep = moocore.is_nondominated(pts, maximise=False, keep_weakly=False)
    front = [r for r, k in zip(candidates, keep, strict=False) if k]
    return sorted(front, key=x)


def reference_point(rows: Sequence, vocab_size: int | None = None) -> tuple[float, float]:
    """(ln V, 1.1 x max executed FLOPs/token): stated with every hypervolume we print.  ln V is the loss
    of a uniform guess over the vocabulary: `vocab_size`, else the largest among the rows' architectures
    (256, bytes, for rows that do not say)."""
    if vocab_size is None:
        vocab_size = max((row_vocab_size(r) for r in rows), default=256)
    flops = [
        r.executed_flops_per_token
        for r in rows
        if r.executed_flops_per_token and math.isfinite(r.executed_flops_per_token)
    ]
    return math.log(vocab_size), 1.1 * max(flops, default=1.0)


def row_vocab_size(row) -> int:
    """The vocabulary of a stored trial row's architecture (256 when it does not say)."""
    config = getattr(row, "config", None)
    arch = config.get("arch") if isinstance(config, dict) else None
    return int(arch.get("vocab_size", 256)) if isinstance(arch, dict) else 256


def hypervolume(rows: Sequence, ref: tuple[float, float]) -> float:
    """Area dominated by the completed rows and bounded by `ref` (points beyond ref count for nothing)."""
    pts = objectives(rows)
    pts = pts[(pts[:, 0] < ref[0]) & (pts[:, 1] < ref[1])] if len(pts) else pts
    return float(moocore.hypervolume(pts, ref=list(ref))) if len(pts) else 0.0


def hypervolume_curve(rows: Sequence, ref: tuple[float, float]) -> list[float]:
    """Hypervolume after each trial, in the order given (the dashboard's HV-over-trials plot)."""
    return [hypervolume(rows[: i + 1], ref) for i in range(len(rows))]
