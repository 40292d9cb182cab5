"""The backtest picks the predictor that ranks the held-out top rungs better: the fit, or the rung below carried."""

import math

import numpy as np
import pytest

from nas.backtest import MIN_PAIRS, backtest, pairwise_tau, rung_below_top
from nas.extrapolate import LooResult, RungPoint
from nas.fidelity import predict_search_with_backtest
from nas.store import RungRow

TOP = 9e10


def loo(trial: int, predicted: float, observed: float, flops: float = TOP) -> LooResult:
    return LooResult(trial, flops, predicted, observed, predicted - observed, "nag")


def test_pairwise_tau_counts_only_pairs_in_the_same_group():
    observed = {0: 1.0, 1: 2.0, 2: 3.0, 3: 0.5}
    predicted = {0: 1.0, 1: 2.0, 2: 1.5, 3: 9.0}
    groups = {0: 1, 1: 1, 2: 1, 3: 2}  # trial 3 is alone in its group: never compared
    # pairs (0,1) +1, (0,2) +1, (1,2) -1
    assert pairwise_tau(predicted, observed, groups) == (pytest.approx(1 / 3), 3)


def test_the_fit_is_chosen_when_it_ranks_the_held_out_rungs_better():
    observed = {n: 2.0 + 0.1 * n for n in range(5)}
    fits = [loo(n, observed[n] + 0.01, observed[n]) for n in range(5)]  # right order
    below = {n: 3.0 - 0.1 * n for n in range(5)}  # the rung below ranks them backwards
    check = backtest(fits, below)
    assert check.chosen == "fit" and check.fit_tau == 1.0 and check.carry_tau == -1.0 and check.pairs == 10
    assert check.fit_mae == pytest.approx(0.01) and "fit tau +1.00" in check.describe()


def test_the_top_rung_is_chosen_when_carrying_it_ranks_better():
    observed = {n: 2.0 + 0.1 * n for n in range(5)}
    fits = [loo(n, 2.0 - 0.1 * n, observed[n]) for n in range(5)]  # backwards
    below = {n: observed[n] + 0.3 for n in range(5)}  # higher, but in the right order
    check = backtest(fits, below)
    assert check.chosen == "top rung" and check.carry_tau == 1.0 and check.fit_tau == -1.0


def test_a_tie_keeps_the_fit_and_too_few_pairs_leave_it_unchecked():
    observed = {n: 2.0 + 0.1 * n for n in range(4)}
    same = [loo(n, observed[n], observed[n]) for n in range(4)]
    assert backtest(same, dict(observed)).chosen == "fit"  # both rank perfectly: the fit
    # Two trials held out at one budget and one at another: a single comparable pair.
    few = [loo(0, 2.0, 2.0), loo(1, 2.1, 2.1), loo(2, 2.2, 2.2, flops=TOP / 3)]
    check = backtest(few, {0: 9.0, 1: 1.0, 2: 5.0})
    assert check.pairs == 1 < MIN_PAIRS and check.chosen == "fit" and not check.checked
    assert "unchecked" in check.describe()


def test_rung_below_top_is_the_seed_mean_of_the_second_highest_rung():
    points = [RungPoint(0, "nag", f, loss, seed) for f, loss, seed in [(1e9, 3.0, 0), (3e9, 2.5, 0), (3e9, 2.7, 1)]]
    points += [RungPoint(0, "nag", 9e9, 2.0, 0), RungPoint(1, "nag", 1e9, 3.3, 0)]
    assert rung_below_top(points) == {0: pytest.approx(2.6)}  # trial 1 has one rung: no backtest


def rows(curves: dict[int, list[float]]) -> list[RungRow]:
    """RungRows of trials whose rung r (budget 1e10 x 3^r) measured curves[trial][r]."""
    return [
        RungRow(n, r, 0, 1e10 * 3**r, 1, 1, loss, 1e10 * 3**r, 1.0, None, None, None, None, None, "nag", 1e5 + n)
        for n, losses in curves.items()
        for r, loss in enumerate(losses)
    ]


def test_on_power_law_curves_the_search_answers_with_the_fit():
    """Curves L = 1.5 + A_i C^-0.3 that cross: the rung below ranks the top rung wrong, the fit right."""
    amplitude = {0: 40.0, 1: 60.0, 2: 80.0, 3: 100.0, 4: 120.0}
    exponent = {0: 0.28, 1: 0.3, 2: 0.32, 3: 0.34, 4: 0.36}
    curves = {n: [1.5 + a * (1e10 * 3**r) ** -exponent[n] for r in range(3)] for n, a in amplitude.items()}
    predictions, check = predict_search_with_backtest(rows(curves), 1e13)
    assert check.checked and check.chosen == "fit"
    assert all(p.predictor == "fit" and p.low <= p.loss <= p.high for p in predictions.values())


def test_where_the_fit_misleads_the_search_answers_with_the_top_rung():
    """Rung 0 ranks the trials backwards and rungs 1-2 keep their order: a two-point fit per trial extrapolates
    rung 0's order; carrying rung 1 forward ranks rung 2 exactly. The answer is then each top rung's loss."""
    curves = {n: [3.0 - 0.3 * n, 2.0 + 0.01 * n, 1.95 + 0.01 * n] for n in range(5)}
    predictions, check = predict_search_with_backtest(rows(curves), 1e13)
    assert check.chosen == "top rung" and check.carry_tau == 1.0 and check.fit_tau < 1.0
    for n, p in predictions.items():
        assert p.predictor == "top rung" and p.loss == p.low == p.high == curves[n][-1]
    assert np.argsort([predictions[n].loss for n in range(5)]).tolist() == list(range(5))
    assert all(math.isfinite(p.loo_error) for p in predictions.values())
