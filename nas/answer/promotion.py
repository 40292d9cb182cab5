"""The sorting rung promotion uses (`nas.answer.rung_decision` holds the rule): which of n trials at one rung are the
best ceil(n / eta) on several minimised objectives, and which ones sit within the noise of that cut. Pure: no store,
no study, only numpy, moocore (non-dominated sorting) and the standard library.

A trial at a rung is a `Candidate`: its predicted validation loss at the target budget (inf for a failed trial),
its executed forward FLOPs per token (known from the config) and, in a search that minimises them, its KV-cache
bytes per token (`Candidate.kv`). Everything below holds for three objectives as for two. `rank` orders them:

1. Candidates whose objectives are all finite come first, ordered by non-dominated sorting (front 1 = the points no
   other point dominates; front 2 = those of the rest; ...). `a` dominates `b` iff `a` is no worse in every
   objective and strictly better in at least one; equal points are in the same front (`nondominated_fronts`).
2. Inside a front, larger NSGA-II crowding distance first (`crowding_distance`: boundary points get +inf, so the
   ends of the trade-off are kept), then the smaller trial id (so the order is deterministic). Only the front that
   straddles the cut is affected by this tie-breaking.
3. Candidates with a non-finite objective (inf or NaN) come last, among themselves by trial id: they are in the cut
   only when fewer than ceil(n / eta) candidates are finite.

`promotable` is the best ceil(n / eta) of that order (`promotion_count`): always exactly that many. A candidate may
carry a `margin`, twice the seed noise of its predicted loss; one left below the cut is *tied with the cut*
(`tied_with_cut`) when, its loss lowered by its margin, it would be in it (PASHA, Bohdal et al., arXiv 2207.06940).
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import moocore
import numpy as np

__all__ = [
    "Candidate",
    "crowding_distance",
    "dominates",
    "nondominated_fronts",
    "promotable",
    "promotion_count",
    "rank",
    "tied_with_cut",
]


@dataclass(frozen=True)
class Candidate:
    """One trial's objectives at one rung, all minimised: `loss` (predicted validation loss at the target
    budget; inf for a failed trial), `flops` (executed forward FLOPs per token) and, in a search that
    minimises them, `kv` (KV-cache bytes per token; None: two objectives). Candidates compared with one
    another have the same objectives."""

    trial: int
    loss: float
    flops: float
    margin: float = 0.0  # twice the seed noise of `loss`: losses closer than this are tied
    kv: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "trial", operator.index(self.trial))
        object.__setattr__(self, "loss", float(self.loss))
        object.__setattr__(self, "flops", float(self.flops))
        object.__setattr__(self, "margin", float(self.margin))
        if self.kv is not None:
            object.__setattr__(self, "kv", float(self.kv))
        if not self.margin >= 0:
            raise ValueError(f"trial {self.trial}: margin must be >= 0 (got {self.margin!r})")

    @property
    def objectives(self) -> tuple[float, ...]:
        """(loss, flops), or (loss, flops, kv) when it has `kv`."""
        return (self.loss, self.flops) if self.kv is None else (self.loss, self.flops, self.kv)

    @property
    def finite(self) -> bool:
        """Every objective is finite (neither inf nor NaN)."""
        return all(math.isfinite(v) for v in self.objectives)


def dominates(a: Candidate, b: Candidate) -> bool:
    """`a` is no worse than `b` in every objective and strictly better in at least one."""
    pairs = list(zip(a.objectives, b.objectives, strict=True))
    return all(x <= y for x, y in pairs) and any(x < y for x, y in pairs)


def _check_unique(candidates: Sequence[Candidate]) -> None:
    seen: set[int] = set()
    for c in candidates:
        if c.trial in seen:
            raise ValueError(f"trial {c.trial} appears more than once")
        seen.add(c.trial)


def _check_eta(eta: float) -> None:
    if isinstance(eta, bool) or not isinstance(eta, numbers.Real):
        raise TypeError(f"eta must be a real number, got {eta!r}")
    if not eta > 1:  # also rejects NaN
        raise ValueError(f"eta must be > 1, got {eta!r}")


def nondominated_fronts(candidates: Iterable[Candidate]) -> list[list[Candidate]]:
    """Non-dominated sorting: front 1 holds the candidates no other candidate dominates (`dominates`),
    front 2 those of the rest, and so on. Equal points are in the same front. Every candidate is in
    exactly one front; each front keeps the input order. Infinite objectives compare as usual (inf is
    worse than any finite value, and equal to inf); NaN has no order and raises ValueError.
    Computed with `moocore.pareto_rank` (O(n log n) for two objectives)."""
    cands = list(candidates)
    if not cands:
        return []
    if len({len(c.objectives) for c in cands}) > 1:
        raise ValueError("candidates compared with one another need the same objectives (kv on all or none)")
    points = np.array([c.objectives for c in cands], dtype=float)
    if np.isnan(points).any():
        raise ValueError("non-dominated sorting is undefined for NaN objectives")
    ranks = moocore.pareto_rank(points)
    return [[c for c, r in zip(cands, ranks, strict=True) if r == level] for level in np.unique(ranks)]


def crowding_distance(front: Sequence[Candidate]) -> dict[int, float]:
    """NSGA-II crowding distance of each candidate of `front` (normally one front of
    `nondominated_fronts`), keyed by trial id; larger means more isolated, hence preferred.

    For each objective in turn (loss, FLOPs, then KV bytes if they have them), the candidates are sorted
    by (value, trial id); the first and the last get +inf, and each other one adds (next value - previous value) /
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
    for i in range(len(front[0].objectives)):
        order = sorted(front, key=lambda c, i=i: (c.objectives[i], c.trial))
        values = [c.objectives[i] for c in order]
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


def promotable(candidates: Iterable[Candidate], eta: float) -> set[int]:
    """Trial ids of the best ceil(n / eta) of `candidates` in the order of `rank`, n = len(candidates).
    ValueError if eta <= 1 or a trial id repeats."""
    cands = list(candidates)
    _check_unique(cands)
    k = promotion_count(len(cands), eta)
    return {c.trial for c in rank(cands)[:k]}


def tied_with_cut(trial: int, at_rung: Sequence[Candidate], eta: float) -> bool:
    """Whether `trial`, not promotable among `at_rung`, would be if its loss were lower by its margin (the
    others unchanged): it is within the noise of the cut. False for a promotable trial or a zero margin."""
    mine = [c for c in at_rung if c.trial == trial]
    if not mine:
        raise ValueError(f"trial {trial} is not among the candidates at its rung")
    if mine[0].margin == 0 or not mine[0].finite or trial in promotable(at_rung, eta):
        return False
    lowered = [replace(c, loss=c.loss - c.margin) if c.trial == trial else c for c in at_rung]
    return trial in promotable(lowered, eta)
