"""Rung reliability on rungs of known quality, and the backtest that picks the predictor: the highest rung carried
on the study's curve, unless the reliability-weighted fit of every rung orders held-out rungs better."""

import pytest

from nas.answer.backtest import backtest
from nas.answer.evidence import MIN_PAIRS, TOP_RUNG, WEIGHTED_FIT, pairwise_tau, rung_reliability
from nas.answer.extrapolate import RungPoint
from nas.answer.target import answer_at_target
from nas.store import RungRow

C = [1e10 * 3**r for r in range(3)]


def points(curves: dict[int, list[float]], seeds: int = 1) -> list[RungPoint]:
    return [
        RungPoint(n, "nag", C[r], loss, seed)
        for n, losses in curves.items()
        for r, loss in enumerate(losses)
        for seed in range(seeds)
    ]


def rows(curves: dict[int, list[float]]) -> list[RungRow]:
    """RungRows of trials whose rung r (budget C[r]) measured curves[trial][r]."""
    return [
        RungRow(n, r, 0, C[r], 1, 1, loss, C[r], 1.0, None, None, None, None, None, "nag", 1e5 + n)
        for n, losses in curves.items()
        for r, loss in enumerate(losses)
    ]


def test_pairwise_tau_counts_only_pairs_in_the_same_group():
    observed = {0: 1.0, 1: 2.0, 2: 3.0, 3: 0.5}
    predicted = {0: 1.0, 1: 2.0, 2: 1.5, 3: 9.0}
    groups = {0: 1, 1: 1, 2: 1, 3: 2}  # trial 3 is alone in its group: never compared
    # pairs (0,1) +1, (0,2) +1, (1,2) -1
    assert pairwise_tau(predicted, observed, groups) == (pytest.approx(1 / 3), 3)


def test_rung_reliability_on_rungs_of_known_quality():
    """Six trials: rung 0 swaps one adjacent pair of rung 1's order (tau 13/15), rung 1 orders rung 2 exactly
    (tau 1); rung 2 is the study's highest (weight 1). Reversed, a rung weighs nothing; with fewer than
    MIN_PAIRS pairs to check it by, it is unmeasured and weighs nothing either."""
    rung1 = [2.0 + 0.1 * n for n in range(6)]
    rung0 = [3.0 + 0.1 * n for n in range(6)]
    rung0[2], rung0[3] = rung0[3], rung0[2]
    curves = {n: [rung0[n], rung1[n], 1.5 + 0.1 * n] for n in range(6)}
    rel = rung_reliability(points(curves))
    assert rel[C[0]].tau == pytest.approx(13 / 15) and rel[C[0]].weight == pytest.approx(13 / 15)
    assert rel[C[0]].pairs == 15
    assert rel[C[1]].tau == 1.0 and rel[C[2]].weight == 1.0 and rel[C[2]].tau is None
    backwards = {n: [3.0 - 0.1 * n, 2.0 + 0.1 * n] for n in range(4)}
    assert rung_reliability(points(backwards))[C[0]].tau == -1.0
    assert rung_reliability(points(backwards))[C[0]].weight == 0.0
    few = {0: [3.0, 2.0], 1: [3.1, 2.1], 2: [3.2]}  # one pair reached rung 1
    assert rung_reliability(points(few))[C[0]].pairs == 1 < MIN_PAIRS
    assert rung_reliability(points(few))[C[0]].tau is None and rung_reliability(points(few))[C[0]].weight == 0.0


def test_where_lower_rungs_mislead_the_answer_is_each_highest_rung_on_the_curve():
    """Rung 0 ranks the trials backwards and rungs 1-2 keep their order: the weighted fit cannot beat carrying
    rung 1; the answer ranks the trials as their top rung does."""
    curves = {n: [3.0 - 0.3 * n, 2.0 + 0.01 * n, 1.95 + 0.01 * n] for n in range(5)}
    answer = answer_at_target(rows(curves), 1e13)
    check = answer.backtest
    assert check.checked and check.chosen == TOP_RUNG and check.carry_tau == 1.0
    assert [p.predictor for p in answer.predictions.values()] == [TOP_RUNG] * 5
    assert sorted(range(5), key=lambda n: answer.predictions[n].loss) == list(range(5))
    assert all(p.basis == "rung 2 on the curve" for p in answer.predictions.values())


def test_the_weighted_fit_is_chosen_where_it_orders_held_out_rungs_better():
    """Curves L = 1.5 + A_n C^-0.3 in order of n, with rung 1 perturbed: trial 2 measured just above trial 3
    there. Carrying rung 1 gets their held-out rung 2 wrong; rung 0, reliable, pulls the weighted fit back."""
    a = {n: 60.0 + 4.0 * n for n in range(6)}
    curves = {n: [1.5 + a[n] * c**-0.3 for c in C] for n in range(6)}
    curves[2][1] = curves[3][1] + 0.0002
    check = backtest(points(curves))
    assert check.checked and check.fit_tau > check.carry_tau and check.chosen == WEIGHTED_FIT
    assert "weighted fit tau" in check.describe()


def test_too_few_pairs_leave_the_highest_rung_as_the_default():
    curves = {0: [3.0, 2.0], 1: [3.1, 2.1], 2: [3.2]}
    check = backtest(points(curves))
    assert not check.checked and check.chosen == TOP_RUNG and check.pairs < MIN_PAIRS
    assert "the default" in check.describe()
