"""MO-ASHA promotion (nas/answer/promotion.py): checked against brute-force definitions on random tables and on
hand-made cases, with and without a noise margin."""

import math
import random
from dataclasses import replace

import numpy as np
import pytest

from nas.answer.promotion import (
    Candidate,
    crowding_distance,
    nondominated_fronts,
    promotable,
    promotion_count,
    rank,
    tied_with_cut,
)

INF = math.inf

# ---------------------------------------------------------------------------------------------
# Brute-force definitions, written from the rule and independent of the module's code.


def bf_dominates(a, b):
    """a, b: (loss, flops). No worse in both, strictly better in one."""
    return a[0] <= b[0] and a[1] <= b[1] and a != b


def bf_fronts(cands):
    """Peel off the points that no remaining point dominates, repeatedly; input order kept."""
    remaining = list(cands)
    fronts = []
    while remaining:
        front = [p for p in remaining if not any(bf_dominates((q.loss, q.flops), (p.loss, p.flops)) for q in remaining)]
        assert front, "a finite set always has a non-dominated point"
        fronts.append(front)
        remaining = [p for p in remaining if p not in front]
    return fronts


def bf_crowding(front):
    """NSGA-II crowding distance, vectorised with numpy: per objective, sort by (value, trial id), ends get
    inf, interior points add (next - previous) / (max - min)."""
    ids = np.array([c.trial for c in front])
    dist = np.zeros(len(front))
    if len(front) <= 2:
        return {int(t): INF for t in ids}
    for col in (np.array([c.loss for c in front]), np.array([c.flops for c in front])):
        order = np.lexsort((ids, col))  # by value, then by id
        v = col[order]
        dist[order[0]] = dist[order[-1]] = INF
        span = v[-1] - v[0]
        if span > 0:
            dist[order[1:-1]] += (v[2:] - v[:-2]) / span
    return {int(t): float(d) for t, d in zip(ids, dist, strict=True)}


def bf_rank(cands):
    finite = [c for c in cands if math.isfinite(c.loss) and math.isfinite(c.flops)]
    rest = [c for c in cands if c not in finite]
    out = []
    for front in bf_fronts(finite):
        cd = bf_crowding(front)
        out += sorted(front, key=lambda c: (-cd[c.trial], c.trial))
    return out + sorted(rest, key=lambda c: c.trial)


def bf_promotable(cands, eta):
    k = -(-len(cands) // eta)  # ceil(n / eta), integer arithmetic
    return {c.trial for c in bf_rank(cands)[:k]}


def random_table(rng, n, *, grid=5, p_inf=0.12):
    """n candidates with distinct random ids; values on a small grid (many ties and duplicate points),
    some inf losses, rarely an inf FLOPs count, and sometimes a fractional value."""
    ids = rng.sample(range(1000), n)
    cands = []
    for t in ids:
        loss = float(rng.randrange(grid))
        if rng.random() < 0.2:
            loss += rng.random()
        if rng.random() < p_inf:
            loss = INF
        flops = float(rng.randrange(grid)) * 1e9
        if rng.random() < 0.03:
            flops = INF
        cands.append(Candidate(t, loss, flops))
    return cands


TABLES = [random_table(random.Random(seed), random.Random(seed).randint(1, 12)) for seed in range(200)]


def ids(cands):
    return [c.trial for c in cands]


# ---------------------------------------------------------------------------------------------
# Brute force on random tables


def test_nondominated_fronts_match_brute_force():
    n_multi = 0
    for table in TABLES:
        got = nondominated_fronts(table)
        assert [ids(f) for f in got] == [ids(f) for f in bf_fronts(table)]
        assert sorted(t for f in got for t in ids(f)) == sorted(ids(table))
        n_multi += len(got) > 1
    assert n_multi > 50  # the tables do exercise several fronts


def test_crowding_distance_matches_nsga2():
    n_checked = 0
    for table in TABLES:
        finite = [c for c in table if math.isfinite(c.loss) and math.isfinite(c.flops)]
        for front in bf_fronts(finite):
            assert crowding_distance(front) == bf_crowding(front)
            n_checked += len(front) > 2
    assert n_checked > 30  # fronts with interior points were covered


def test_rank_and_promotable_match_brute_force():
    for seed, table in enumerate(TABLES):
        assert ids(rank(table)) == ids(bf_rank(table))
        shuffled = table[:]
        random.Random(seed).shuffle(shuffled)
        assert ids(rank(shuffled)) == ids(rank(table))  # the input order never matters
        for eta in (2, 3, 4):
            got = promotable(table, eta)
            assert got == bf_promotable(table, eta), (seed, eta)
            assert len(got) == math.ceil(len(table) / eta)


def test_promoted_are_never_dominated_by_a_stopped_finite_trial():
    for table in TABLES:
        for eta in (2, 3):
            promoted = promotable(table, eta)
            stopped_finite = [c for c in table if c.trial not in promoted and c.finite]
            for p in (c for c in table if c.trial in promoted):
                assert not any(bf_dominates((s.loss, s.flops), (p.loss, p.flops)) for s in stopped_finite)
                if not p.finite:  # a failed trial only fills places no finite trial wants
                    assert not stopped_finite


# ---------------------------------------------------------------------------------------------
# Hand-made cases

FRONT = [Candidate(10, 1, 9), Candidate(11, 2, 5), Candidate(12, 4, 1)]
# Front 2 is (3, 9), (5, 6), (6, 2); then (7, 7), (8, 9) and (9, 9), one front each.
DOMINATED = [
    Candidate(1, 5, 6),  # middle of front 2, smallest id: still behind both ends of front 2 (crowding)
    Candidate(20, 3, 9),
    Candidate(21, 6, 2),
    Candidate(2, 7, 7),
    Candidate(3, 8, 9),
    Candidate(4, 9, 9),
]


def test_clear_front_of_three_is_promoted_with_eta_3():
    table = DOMINATED[:3] + FRONT + DOMINATED[3:]
    assert promotable(table, 3) == {10, 11, 12}
    fronts = nondominated_fronts(table)
    assert [sorted(ids(f)) for f in fronts] == [[10, 11, 12], [1, 20, 21], [2], [3], [4]]


def test_eta_2_adds_the_ends_of_the_second_front():
    table = FRONT + DOMINATED
    assert promotable(table, 2) == {10, 11, 12, 20, 21}  # ceil(9 / 2) = 5
    assert crowding_distance([DOMINATED[0], DOMINATED[1], DOMINATED[2]]) == {1: 2.0, 20: INF, 21: INF}
    assert ids(rank(table)) == [10, 12, 11, 20, 21, 1, 2, 3, 4]


def test_single_candidate_is_promoted():
    assert promotable([Candidate(5, 3.0, 1e9)], 3) == {5}
    assert promotable([Candidate(5, 3.0, 1e9)], 2) == {5}
    assert promotable([], 3) == set()
    # the rule promotes ceil(1 / eta) = 1 even when the only trial failed
    assert promotable([Candidate(5, INF, 1e9)], 3) == {5}


def test_inf_losses_are_never_promoted_ahead_of_finite_ones():
    failed = [Candidate(t, INF, 1.0) for t in (0, 1, 2, 3)]  # smallest ids and cheapest
    finite = [Candidate(8, 100.0, 1e12), Candidate(9, 200.0, 2e12)]  # 9 is dominated by 8
    table = failed + finite
    assert promotable(table, 3) == {8, 9}
    assert promotable(table, 2) == {8, 9, 0}
    assert ids(rank(table)) == [8, 9, 0, 1, 2, 3]
    nan = Candidate(4, math.nan, 1.0)
    assert ids(rank([nan, *finite, Candidate(7, INF, INF)])) == [8, 9, 4, 7]


def test_tie_breaking_is_deterministic():
    # evenly spaced front: both ends infinite, the three interior points all at 1.0, so ids decide
    line = [Candidate(t, x, 4 - x) for t, x in zip((30, 9, 2, 5, 31), range(5), strict=True)]
    assert crowding_distance(line) == {30: INF, 9: 1.0, 2: 1.0, 5: 1.0, 31: INF}
    for seed in range(10):
        table = line[:]
        random.Random(seed).shuffle(table)
        assert ids(rank(table)) == [30, 31, 2, 5, 9]
        assert promotable(table, 2) == {30, 31, 2}
        assert promotable(table, 3) == {30, 31}
    # duplicated points: the ends of the (value, id) order are the boundary points
    dup = [Candidate(t, 1.0, 1.0) for t in (7, 3, 5, 1)]
    assert crowding_distance(dup) == {1: INF, 7: INF, 3: 0.0, 5: 0.0}
    assert promotable(dup, 2) == {1, 7}
    assert promotable(dup, 4) == {1}


def test_invalid_input_is_rejected():
    table = FRONT + DOMINATED
    assert promotion_count(3, 1.5) == 2 and promotion_count(4, 1.5) == 3  # a ratio below 2 promotes most
    for eta in (1, 0.5, 0, -3, math.nan):
        with pytest.raises(ValueError):
            promotable(table, eta)
    with pytest.raises(ValueError):
        promotable([Candidate(1, 1, 1), Candidate(1, 2, 0)], 3)
    with pytest.raises(ValueError):
        rank([Candidate(1, 1, 1), Candidate(1, 1, 1)])
    with pytest.raises(ValueError):
        tied_with_cut(99, table, 3)
    with pytest.raises(ValueError):
        nondominated_fronts([Candidate(1, math.nan, 1)])
    with pytest.raises(ValueError):
        crowding_distance([Candidate(1, INF, 1), Candidate(2, 1, 2), Candidate(3, 2, 0)])
    with pytest.raises(ValueError):
        Candidate(1, 1.0, 1.0, margin=-0.1)
    with pytest.raises(ValueError):
        tied_with_cut(99, table, 3)


def test_candidate_is_frozen_and_normalised():
    c = Candidate(np.int64(4), 1, np.float32(2.5))
    assert (type(c.trial), type(c.loss), type(c.flops)) == (int, float, float)
    with pytest.raises(AttributeError):
        c.loss = 0.0  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# Ties with the cut: a trial below it that its margin (twice its seed noise) would put above it


def test_tied_with_cut_matches_brute_force_on_random_tables():
    """Tied iff not promotable as measured, and promotable (by the brute-force rank) with its own loss lowered by
    its margin while the others stay put."""
    rng = random.Random(77)
    ties = 0
    for table in TABLES:
        table = [replace(c, margin=rng.choice((0.0, 0.3, 1.0, 2.5))) for c in table]
        for eta in (2, 3):
            promoted = bf_promotable(table, eta)
            for c in table:
                lowered = [replace(o, loss=o.loss - o.margin) if o.trial == c.trial else o for o in table]
                finite = math.isfinite(c.loss) and math.isfinite(c.flops)
                expected = (
                    finite and c.margin > 0 and c.trial not in promoted and c.trial in bf_promotable(lowered, eta)
                )
                assert tied_with_cut(c.trial, table, eta) == expected, (table, eta, c)
                ties += expected
    assert ties > 30  # the tables do exercise ties


def test_on_one_cost_a_tie_is_a_loss_within_the_margin_of_the_last_promoted():
    table = [Candidate(t, loss, 1e9, margin=0.1) for t, loss in enumerate([1.0, 1.05, 1.2, 1.3, 1.02])]
    assert promotable(table, eta=5) == {0}  # ceil(5 / 5) = 1
    assert {c.trial for c in table if tied_with_cut(c.trial, table, eta=5)} == {1, 4}  # 0.95, 0.92 < 1.0
    quiet = [replace(c, margin=0.0) for c in table]
    assert not any(tied_with_cut(c.trial, quiet, eta=5) for c in quiet)  # no noise, no ties
