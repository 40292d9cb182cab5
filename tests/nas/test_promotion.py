"""MO-ASHA promotion (nas/promotion.py): checked against brute-force definitions on random tables,
on hand-made cases, and through the asynchronous `RungLadder`."""

import math
import pickle
import random

import numpy as np
import pytest

from nas.promotion import (
    Candidate,
    RungLadder,
    crowding_distance,
    nondominated_fronts,
    promotable,
    rank,
    should_promote,
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
    assert should_promote(5, [Candidate(5, 3.0, 1e9)], 2)
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
    for eta in (1, 1.5, 0, -3, math.nan):
        with pytest.raises(ValueError):
            promotable(table, eta)
    with pytest.raises(ValueError):
        promotable([Candidate(1, 1, 1), Candidate(1, 2, 0)], 3)
    with pytest.raises(ValueError):
        rank([Candidate(1, 1, 1), Candidate(1, 1, 1)])
    with pytest.raises(ValueError):
        should_promote(99, table, 3)
    with pytest.raises(ValueError):
        nondominated_fronts([Candidate(1, math.nan, 1)])
    with pytest.raises(ValueError):
        crowding_distance([Candidate(1, INF, 1), Candidate(2, 1, 2), Candidate(3, 2, 0)])
    with pytest.raises(ValueError):
        RungLadder(3, eta=1)
    with pytest.raises(ValueError):
        RungLadder(0)


def test_candidate_is_frozen_and_normalised():
    c = Candidate(np.int64(4), 1, np.float32(2.5))
    assert (type(c.trial), type(c.loss), type(c.flops)) == (int, float, float)
    with pytest.raises(AttributeError):
        c.loss = 0.0  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# RungLadder


def test_ladder_asynchronous_decisions():
    ladder = RungLadder(3, eta=3)
    steps = [
        # (trial, rung, loss, flops, continue?)
        (1, 0, 5.0, 10.0, True),  # alone at rung 0: ceil(1/3) = 1
        (2, 0, 6.0, 12.0, False),  # dominated by 1
        (3, 0, 4.0, 20.0, False),  # on the front with 1; both ends (inf), the smaller id wins
        (4, 0, 1.0, 1.0, True),  # dominates everyone; ceil(4/3) = 2
        (1, 1, 5.0, 10.0, True),  # alone at rung 1
        (4, 1, 1.0, 1.0, True),  # dominates 1
        (1, 2, 5.0, 10.0, False),  # top rung
        (5, 0, INF, 0.5, False),  # failed: ranks last
        (2, 0, 0.5, 0.5, True),  # 2 reports rung 0 again: its new point replaces the old and dominates all
        (6, 1, 9.0, 9.0, False),  # ceil(3/3) = 1 and 4 dominates 6
    ]
    for trial, rung, loss, flops, expected in steps:
        assert ladder.report(trial, rung, loss, flops) is expected, (trial, rung)
    assert ids(ladder.at_rung(0)) == [1, 2, 3, 4, 5]  # order of first report; 2 was replaced, not added
    assert ladder.at_rung(0)[1] == Candidate(2, 0.5, 0.5)
    assert ids(ladder.at_rung(1)) == [1, 4, 6]
    assert ids(ladder.at_rung(2)) == [1]
    with pytest.raises(ValueError):
        ladder.report(7, 3, 1.0, 1.0)
    with pytest.raises(ValueError):
        ladder.at_rung(-1)


def test_top_rung_never_continues():
    ladder = RungLadder(2, eta=2)
    assert [ladder.report(t, 1, float(t), 1.0) for t in range(5)] == [False] * 5
    single = RungLadder(1)
    assert not single.report(0, 0, 0.0, 0.0)
    assert not single.report(1, 0, -1.0, -1.0)


def test_ladder_matches_brute_force_on_random_streams():
    rng = random.Random(1234)
    for _ in range(30):
        n_rungs, eta = rng.randint(2, 4), rng.choice((2, 3))
        ladder = RungLadder(n_rungs, eta)
        seen = [dict() for _ in range(n_rungs)]
        for _ in range(40):
            c = random_table(rng, 1, grid=6)[0]
            trial = rng.randrange(15)  # repeats: replacements
            rung = rng.randrange(n_rungs)
            seen[rung][trial] = Candidate(trial, c.loss, c.flops)
            expected = rung < n_rungs - 1 and trial in bf_promotable(list(seen[rung].values()), eta)
            assert ladder.report(trial, rung, c.loss, c.flops) is expected


def test_ladder_pickles():
    ladder = RungLadder(3, eta=3)
    for trial, rung, loss, flops in [(1, 0, 5.0, 10.0), (2, 0, 6.0, 12.0), (3, 0, INF, 1.0), (1, 1, 5.0, 10.0)]:
        ladder.report(trial, rung, loss, flops)
    copy = pickle.loads(pickle.dumps(ladder))
    assert (copy.n_rungs, copy.eta) == (3, 3)
    for r in range(3):
        assert copy.at_rung(r) == ladder.at_rung(r)
    # both continue identically, and independently
    for trial, rung, loss, flops in [(4, 0, 1.0, 1.0), (5, 0, 0.5, 20.0), (4, 1, 1.0, 1.0)]:
        assert copy.report(trial, rung, loss, flops) == ladder.report(trial, rung, loss, flops)
    copy.report(9, 0, 0.0, 0.0)
    assert len(copy.at_rung(0)) == len(ladder.at_rung(0)) + 1
