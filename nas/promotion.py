"""Multi-objective asynchronous successive halving (MO-ASHA): which trials continue to the next rung.

Trials are measured on a ladder of budgets, rungs 0..k-1 (geometric with ratio `eta`). At each rung it
reaches, a trial reports two objectives, both minimised: the predicted validation loss at the user's
target budget (may be +inf for a failed trial) and the executed forward FLOPs per token (known from
the config).

The rule (MO-ASHA, Schmucker et al., arXiv:2106.12639, with its NSGA-II selection; asynchronous as in
ASHA, Li et al., arXiv:1810.05934): when a trial reports at rung r < k-1, it continues to rung r+1 iff,
among ALL trials that have reported at rung r so far (itself included; n of them), it is in the best
ceil(n / eta) of the following total order (`rank`):

1. Trials whose two objectives are both finite come first, ordered by non-dominated sorting
   (front 1 = the points no other point dominates; front 2 = those of the rest; ...). `a` dominates
   `b` iff `a` is no worse in both objectives and strictly better in at least one; equal points are
   in the same front.
2. Inside a front, larger NSGA-II crowding distance first (`crowding_distance`: boundary points get
   +inf), then the smaller trial id (so the order is deterministic). Only the front that straddles
   the cut ceil(n / eta) is affected by this tie-breaking.
3. Trials with a non-finite objective (inf or NaN) come last, among themselves by trial id. They are
   therefore promoted only when fewer than ceil(n / eta) trials at the rung are finite (e.g. one
   failed trial alone at its rung): the count promoted is always exactly ceil(n / eta).

The decision is taken once, when the trial reports (the "stopping" form of ASHA, as Ray Tune's
ASHAScheduler does it), against the trials seen so far: an early trial is judged against few peers
(the first trial at a rung always continues), and a trial stopped now is not revived if later
arrivals would have ranked it higher.

Why not Optuna's pruners or Ray Tune's ASHA: they are single-objective. They rank trials at a rung by
one scalar, so ranking by loss keeps only the low-loss (usually expensive) end of the trade-off and
stops the cheap architectures that the Pareto front needs, and any fixed scalarisation of
(loss, FLOPs) picks one point of the trade-off in advance. Ranking by Pareto front, then crowding
distance, keeps trials spread along the whole front.

Only numpy, moocore (non-dominated sorting) and the standard library are imported; `RungLadder` holds
plain data so that Ray Tune can pickle a stopper or scheduler that owns one.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import moocore
import numpy as np

__all__ = [
    "Candidate",
    "RungLadder",
    "crowding_distance",
    "dominates",
    "nondominated_fronts",
    "promotable",
    "promotion_count",
    "rank",
    "should_promote",
]


@dataclass(frozen=True)
class Candidate:
    """One trial's two objectives at one rung, both minimised: `loss` (predicted validation loss at the
    target budget; inf for a failed trial) and `flops` (executed forward FLOPs per token)."""

    trial: int
    loss: float
    flops: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "trial", operator.index(self.trial))
        object.__setattr__(self, "loss", float(self.loss))
        object.__setattr__(self, "flops", float(self.flops))

    @property
    def finite(self) -> bool:
        """Both objectives are finite (neither inf nor NaN)."""
        return math.isfinite(self.loss) and math.isfinite(self.flops)


def dominates(a: Candidate, b: Candidate) -> bool:
    """`a` is no worse than `b` in both objectives and strictly better in at least one."""
    return a.loss <= b.loss and a.flops <= b.flops and (a.loss < b.loss or a.flops < b.flops)


def _check_unique(candidates: Sequence[Candidate]) -> None:
    seen: set[int] = set()
    for c in candidates:
        if c.trial in seen:
            raise ValueError(f"trial {c.trial} appears more than once")
        seen.add(c.trial)


def _check_eta(eta: float) -> None:
    if isinstance(eta, bool) or not isinstance(eta, numbers.Real):
        raise TypeError(f"eta must be a real number, got {eta!r}")
    if not eta >= 2:  # also rejects NaN
        raise ValueError(f"eta must be >= 2, got {eta!r}")


def nondominated_fronts(candidates: Iterable[Candidate]) -> list[list[Candidate]]:
    """Non-dominated sorting: front 1 holds the candidates no other candidate dominates (`dominates`),
    front 2 those of the rest, and so on. Equal points are in the same front. Every candidate is in
    exactly one front; each front keeps the input order. Infinite objectives compare as usual (inf is
    worse than any finite value, and equal to inf); NaN has no order and raises ValueError.
    Computed with `moocore.pareto_rank` (O(n log n) for two objectives)."""
    cands = list(candidates)
    if not cands:
        return []
    points = np.array([(c.loss, c.flops) for c in cands], dtype=float)
    if np.isnan(points).any():
        raise ValueError("non-dominated sorting is undefined for NaN objectives")
    ranks = moocore.pareto_rank(points)
    return [[c for c, r in zip(cands, ranks, strict=True) if r == level] for level in np.unique(ranks)]


def crowding_distance(front: Sequence[Candidate]) -> dict[int, float]:
    """NSGA-II crowding distance of each candidate of `front` (normally one front of
    `nondominated_fronts`), keyed by trial id; larger means more isolated, hence preferred.

    For each objective in turn (loss, then FLOPs), the candidates are sorted by (value, trial id);
    the first and the last get +inf, and each other one adds (next value - previous value) /
    (largest value - smallest value), where next/previous are its neighbours in that order; an
    objective with no spread (all values equal) adds nothing to the interior ones. With one or two
    candidates, all are boundary points (+inf). Objectives must be finite and trial ids unique
    (ValueError otherwise)."""
    front = list(front)
    _check_unique(front)
    if not all(c.finite for c in front):
        raise ValueError("crowding distance needs finite objectives")
    dist = {c.trial: 0.0 for c in front}
    if len(front) <= 2:
        return {t: math.inf for t in dist}
    for objective in ("loss", "flops"):
        order = sorted(front, key=lambda c: (getattr(c, objective), c.trial))
        values = [getattr(c, objective) for c in order]
        span = values[-1] - values[0]
        dist[order[0].trial] = dist[order[-1].trial] = math.inf
        if span > 0:
            for i in range(1, len(order) - 1):
                dist[order[i].trial] += (values[i + 1] - values[i - 1]) / span
    return dist


def rank(candidates: Iterable[Candidate]) -> list[Candidate]:
    """All candidates, best first: finite ones by front (`nondominated_fronts`), inside a front by
    crowding distance (`crowding_distance`, larger first) then trial id (smaller first); then the
    ones with a non-finite objective, by trial id. Trial ids must be unique (ValueError)."""
    cands = list(candidates)
    _check_unique(cands)
    ordered: list[Candidate] = []
    for front in nondominated_fronts(c for c in cands if c.finite):
        dist = crowding_distance(front)
        ordered.extend(sorted(front, key=lambda c: (-dist[c.trial], c.trial)))
    ordered.extend(sorted((c for c in cands if not c.finite), key=lambda c: c.trial))
    return ordered


def promotion_count(n: int, eta: float) -> int:
    """How many of n trials at a rung continue: ceil(n / eta)."""
    _check_eta(eta)
    return math.ceil(n / eta)


def promotable(candidates: Iterable[Candidate], eta: float = 3) -> set[int]:
    """Trial ids of the best ceil(n / eta) of `candidates` in the order of `rank`, n = len(candidates).
    ValueError if eta < 2 or a trial id repeats."""
    cands = list(candidates)
    _check_unique(cands)
    k = promotion_count(len(cands), eta)
    return {c.trial for c in rank(cands)[:k]}


def should_promote(trial: int, at_rung: Sequence[Candidate], eta: float = 3) -> bool:
    """The asynchronous decision for `trial`, which has just reported at a rung: whether it is in
    `promotable(at_rung, eta)`, `at_rung` being every trial that has reported at that rung so far,
    `trial` included (ValueError if it is missing)."""
    if all(c.trial != trial for c in at_rung):
        raise ValueError(f"trial {trial} is not among the candidates at its rung")
    return trial in promotable(at_rung, eta)


class RungLadder:
    """The reports of all trials at each rung of a ladder of `n_rungs` rungs, and the MO-ASHA decision
    for each report (`report`). Plain data (ints and dicts of `Candidate`), hence picklable.

    The ladder does not check that a trial reporting at rung r > 0 was allowed to continue at r-1:
    the caller stops a trial when `report` returns False."""

    def __init__(self, n_rungs: int, eta: float = 3):
        n_rungs = operator.index(n_rungs)
        if n_rungs < 1:
            raise ValueError(f"n_rungs must be >= 1, got {n_rungs}")
        _check_eta(eta)
        self.n_rungs = n_rungs
        self.eta = eta
        self._rungs: list[dict[int, Candidate]] = [{} for _ in range(n_rungs)]

    def _check_rung(self, rung: int) -> int:
        rung = operator.index(rung)
        if not 0 <= rung < self.n_rungs:
            raise ValueError(f"rung must be in [0, {self.n_rungs}), got {rung}")
        return rung

    def report(self, trial: int, rung: int, loss: float, flops: float) -> bool:
        """Record `trial`'s objectives at `rung` (replacing its earlier report at that rung, if any)
        and say whether it continues to rung + 1: always False at the top rung, else
        `should_promote(trial, self.at_rung(rung), self.eta)`."""
        rung = self._check_rung(rung)
        cand = Candidate(trial, loss, flops)
        self._rungs[rung][cand.trial] = cand
        if rung == self.n_rungs - 1:
            return False
        return should_promote(cand.trial, self.at_rung(rung), self.eta)

    def at_rung(self, rung: int) -> list[Candidate]:
        """The latest report of every trial that has reported at `rung`, in order of first report."""
        return list(self._rungs[self._check_rung(rung)].values())

    def __repr__(self) -> str:
        counts = [len(r) for r in self._rungs]
        return f"RungLadder(n_rungs={self.n_rungs}, eta={self.eta}, reports per rung={counts})"
