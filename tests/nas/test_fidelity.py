"""Answering at the target: the rung decider stores rungs once and promotes by MO-ASHA; predictions per trial."""

import math

import pytest

from nas.extrapolate import NONE
from nas.fidelity import RungDecider, at_target, predict_search
from nas.pareto import pareto_rows
from nas.promotion import Candidate, promotable
from nas.store import Store, default_url

TARGET = 1e15


def rung(r: int, loss: float, flops: float = 1e10) -> dict:
    return {
        "rung": r,
        "budget_flops": flops * 3**r,
        "steps": 10 * 3**r,
        "tokens": 1280 * 3**r,
        "val_loss": loss,
        "training_flops": flops * 3**r,
        "train_seconds": 1.0,
    }


@pytest.fixture
def store(tmp_path):
    with Store(default_url(tmp_path)) as s:
        s.create_search(
            "s",
            requested_trials=9,
            budget={"trial_flops": 1e10},
            space={},
            settings={},
            optuna_study_name=None,
            code_version=None,
        )
        yield s


def start(store, number: int, residual: str, flops_per_token: float) -> None:
    config = {"residual": residual, "n_layers": 2, "executed_flops_per_token": flops_per_token}
    store.start_trial("s", number=number, config=config)


def test_the_decider_stores_each_rung_once_and_promotes_the_best_third_so_far(store):
    decide = RungDecider(store.url, "s", TARGET, eta=3, n_rungs=3)
    trials = {0: (2.0, 1e5), 1: (2.5, 2e5), 2: (3.0, 3e5), 3: (1.5, 4e5), 4: (2.2, 5e4), 5: (3.5, 9e5)}
    decisions = {}
    for number, (loss, fpt) in trials.items():
        start(store, number, "nag", fpt)
        decisions[number] = decide(number, 0, fpt, rung(0, loss)).promote
        # The same rule by brute force over the trials that reached rung 0 so far (no trial has two rungs
        # yet, so nothing is extrapolated: the prediction is the measured loss).
        so_far = [Candidate(n, trials[n][0], trials[n][1]) for n in trials if n <= number]
        assert decisions[number] == (number in promotable(so_far, 3)), number
    assert decisions == {0: True, 1: False, 2: False, 3: True, 4: True, 5: False}
    again = decide(0, 0, 1e5, {**rung(0, 2.0), "val_loss": 9.0})  # a repeat (a retried attempt) is not stored
    assert again.predicted_loss == 2.0 and not again.promote  # and 0 is no longer in the best 2 of 6
    assert [(r.number, r.val_loss) for r in store.rungs("s")][:1] == [(0, 2.0)]


def test_the_top_rung_and_a_non_finite_loss_never_climb(store):
    decide = RungDecider(store.url, "s", TARGET, eta=3, n_rungs=2)
    start(store, 0, "cascaded", 1e5)
    assert decide(0, 0, 1e5, rung(0, 2.0)).promote
    top = decide(0, 0, 1e5, rung(1, 1.9))
    assert not top.promote and math.isfinite(top.predicted_loss)
    start(store, 1, "cascaded", 1e5)
    assert not decide(1, 0, 1e5, rung(0, math.inf)).promote


def test_predictions_follow_the_fitted_curves_and_make_the_front_at_the_target(store):
    """Four cascaded trials on L = 1.5 + A C^-0.3: the prediction at T is the curve's value, with a band."""
    amplitudes = {0: 400.0, 1: 600.0, 2: 800.0, 3: 1000.0}
    for number, a in amplitudes.items():
        start(store, number, "cascaded", 1e5 * (number + 1))
        for r in range(3 if number < 3 else 1):
            c = 1e10 * 3**r
            store.record_rung("s", number, 0, rung(r, 1.5 + a * c**-0.3))
    predictions = predict_search(store.rungs("s"), TARGET)
    for number, a in amplitudes.items():
        p = predictions[number]
        assert p.loss == pytest.approx(1.5 + a * TARGET**-0.3, rel=1e-3)
        assert p.low <= p.loss <= p.high and p.group != NONE
        assert p.rungs == (3 if number < 3 else 1)
        assert (p.loo_error is None) == (number == 3) and (number == 3 or abs(p.loo_error) < 1e-3)
    rows = store.trials("s")
    front = pareto_rows([r for r in at_target(rows, predictions)])
    assert front == []  # none completed yet: fronts hold completed trials only
    assert [r.val_loss for r in at_target(rows, predictions)] == [predictions[n].loss for n in range(4)]
