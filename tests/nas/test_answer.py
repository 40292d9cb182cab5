"""Answering at the target: the rung decider stores rungs once and promotes by MO-ASHA; predictions per trial."""

import logging
import math
from dataclasses import replace

import optuna
import pytest

from nas.answer.extrapolate import NONE
from nas.answer.pareto import pareto_rows
from nas.answer.promotion import Candidate, promotable
from nas.answer.rung_decision import REMEASURE_SEED_OFFSET, PromotionRule
from nas.answer.target import answer_at_target, at_target, predict_search
from nas.search.rung_gate import StoreRungGate
from nas.search.study import optuna_storage
from nas.store import Store, default_url
from workers.training.records import RungRecord
from workers.trial.contract import CountedCosts, RungVerdict, Verdict

TARGET = 1e15


def rung(r: int, loss: float, flops: float = 1e10, seed: int = 0) -> RungRecord:
    return RungRecord(r, seed, flops * 3**r, 10 * 3**r, 1280 * 3**r, loss, flops * 3**r, 1.0)


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
    """Trial `number` running, with its counted FLOPs per token (what the search stores when it starts)."""
    store.start_trial(
        "s", number=number, config={"residual": residual, "n_layers": 2}, costs=CountedCosts(flops_per_token)
    )


def climbs(verdict: RungVerdict) -> bool:
    return verdict.verdict == Verdict.CLIMB


def again(verdict: RungVerdict) -> bool:
    return verdict.verdict == Verdict.MEASURE_AGAIN


def test_the_decider_stores_each_rung_once_and_promotes_the_best_third_so_far(store):
    decide = StoreRungGate(store.url, "s", PromotionRule(TARGET, 3, 3))
    trials = {0: (2.0, 1e5), 1: (2.5, 2e5), 2: (3.0, 3e5), 3: (1.5, 4e5), 4: (2.2, 5e4), 5: (3.5, 9e5)}
    decisions = {}
    for number, (loss, fpt) in trials.items():
        start(store, number, "nag", fpt)
        decisions[number] = climbs(decide(number, fpt, rung(0, loss)))
        # The same rule by brute force over the trials that reached rung 0 so far (no trial has two rungs
        # yet, so nothing is extrapolated: the prediction is the measured loss).
        so_far = [Candidate(n, trials[n][0], trials[n][1]) for n in trials if n <= number]
        assert decisions[number] == (number in promotable(so_far, 3)), number
    assert decisions == {0: True, 1: False, 2: False, 3: True, 4: True, 5: False}
    repeat = decide(0, 1e5, replace(rung(0, 2.0), val_loss=9.0))  # a repeat (a retried attempt) is not stored
    assert repeat.predicted_loss == 2.0 and not climbs(repeat)  # and 0 is no longer in the best 2 of 6
    assert [(r.number, r.val_loss) for r in store.rungs("s")][:1] == [(0, 2.0)]


def test_the_top_rung_and_a_non_finite_loss_never_climb(store):
    decide = StoreRungGate(store.url, "s", PromotionRule(TARGET, 3, 2))
    start(store, 0, "cascaded", 1e5)
    assert climbs(decide(0, 1e5, rung(0, 2.0)))
    top = decide(0, 1e5, rung(1, 1.9))
    assert not climbs(top) and math.isfinite(top.predicted_loss)
    start(store, 1, "cascaded", 1e5)
    assert not climbs(decide(1, 1e5, rung(0, math.inf)))


def climb(decide, store, number: int, a: float, seed: int = 0) -> list:
    """Trial `number` on L = 1.5 + a C^-0.3, reporting rung after rung while the decider promotes it."""
    decisions = [decide(number, 1e5, rung(0, 1.5 + a * 1e10**-0.3, seed=seed))]
    while climbs(decisions[-1]):
        r = len(decisions)
        decisions.append(decide(number, 1e5, rung(r, 1.5 + a * (1e10 * 3**r) ** -0.3, seed=seed)))
    return decisions


def test_the_final_decision_writes_the_band_into_the_optuna_trial_once_bands_are_calibrated(store, caplog):
    """A trial's last decision carries its band (None while fewer than 4 trials have a held-out rung), which
    lands in its (still running) Optuna trial."""
    study = optuna.create_study(study_name="s-study", storage=optuna_storage(store.url), directions=["minimize"] * 2)
    decide = StoreRungGate(store.url, "s", PromotionRule(TARGET, 3, 3), optuna_study="s-study")
    for number in range(4):  # measured earlier at two rungs each: 4 held-out rungs calibrate the bands
        start(store, number, "cascaded", 1e5)
        for r in range(2):
            store.record_rung("s", number, rung(r, 1.5 + (300.0 + 50 * number) * (1e10 * 3**r) ** -0.3 + 0.002 * r))
    assert study.ask().number == 0
    for _ in range(3):
        study.ask()
    climbed = {}
    for number, a in zip(range(4, 8), [400.0, 600.0, 800.0, 1000.0], strict=True):
        assert study.ask().number == number
        start(store, number, "cascaded", 1e5)
        decisions = climb(decide, store, number, a)
        assert all(d.band is None for d in decisions[:-1])  # only the final decision carries one
        final = decisions[-1]
        assert final.band is not None and final.band[0] <= final.predicted_loss <= final.band[1]
        climbed[number] = (len(decisions), list(final.band))
    trials = optuna.load_study(study_name="s-study", storage=optuna_storage(store.url)).trials
    for number, (n, band) in climbed.items():
        assert trials[number].user_attrs == {"target_flops": TARGET, "rungs_climbed": n, "target_loss_band": band}
    # Best effort: a trial Optuna already closed (a resumed driver) or an unknown study never stops the trial.
    closed = study.ask()
    study.tell(closed, [2.0, 1e5])
    start(store, closed.number, "cascaded", 1e5)
    with caplog.at_level(logging.WARNING, logger="nas.answer.target"):
        assert decide(closed.number, 1e5, rung(2, 1.6)).band is not None
        lost = StoreRungGate(store.url, "s", PromotionRule(TARGET, 3, 3), optuna_study="no-such-study")
        assert lost(4, 1e5, rung(2, 1.6)).band is not None
    assert len([r for r in caplog.records if "band not written" in r.message]) == 2


def test_a_band_is_none_while_uncalibrated(store):
    decide = StoreRungGate(store.url, "s", PromotionRule(TARGET, 3, 2))
    start(store, 0, "cascaded", 1e5)
    assert climbs(decide(0, 1e5, rung(0, 2.0)))
    final = decide(0, 1e5, rung(1, 1.9))
    assert not climbs(final) and final.band is None and math.isfinite(final.predicted_loss)


def test_on_replica_rungs_the_first_stops_measure_the_noise_then_ties_are_measured_again(store):
    """With remeasure (replica rungs): a trial that would stop while the study has fewer than NOISE_REPEATS
    repeated rungs measures its rung again first; once the noise is known, a trial within twice the noise of
    the cut measures again, then climbs if still tied; a clear loser stops at once."""
    decide = StoreRungGate(store.url, "s", PromotionRule(TARGET, 3, 3, remeasure=True))

    def report(number: int, loss: float, seed: int = 0):
        return decide(number, 1e5, replace(rung(0, loss, seed=seed), d_model=32))

    for n in range(4):
        start(store, n, "cascaded", 1e5)
    assert climbs(report(0, 2.00))  # alone: promoted
    first = report(1, 2.30)  # would stop; the noise is not measured yet
    assert again(first) and not climbs(first)
    assert not climbs(report(1, 2.32, seed=REMEASURE_SEED_OFFSET))  # measured twice: stops (not tied: no noise)
    assert again(report(2, 2.40))
    assert not again(report(2, 2.41, seed=REMEASURE_SEED_OFFSET))
    # Two repeated rungs: seed noise sqrt((0.02^2 / 2 + 0.01^2 / 2) / 2) = 0.0112, margin 0.022 at rung 0.
    assert {(r.number, r.seed) for r in store.rungs("s")} >= {(1, REMEASURE_SEED_OFFSET), (2, REMEASURE_SEED_OFFSET)}
    start(store, 4, "cascaded", 1e5)
    tie = report(3, 2.01)  # ceil(4 / 3) = 2 promoted: 0 and ... 3 is second best anyway
    assert climbs(tie)
    close = report(4, 2.015)  # 5 at rung 0: 2 promoted (0, 3); 4 is within the margin of 3
    assert again(close) and not climbs(close)
    assert climbs(report(4, 2.012, seed=REMEASURE_SEED_OFFSET))  # still tied on its seed mean: climbs with 3


def test_a_budget_ladder_promotes_ties_without_measuring_again(store):
    decide = StoreRungGate(store.url, "s", PromotionRule(TARGET, 3, 3))
    for n in range(5):
        start(store, n, "cascaded", 1e5)
    for n, seed, loss in [(1, 0, 2.30), (1, 1, 2.32), (2, 0, 2.40), (2, 1, 2.41)]:
        store.record_rung("s", n, rung(0, loss, seed=seed))  # repeats measured earlier: the noise is known
    assert climbs(decide(0, 1e5, rung(0, 2.00)))
    assert climbs(decide(3, 1e5, rung(0, 2.01)))
    tied = decide(4, 1e5, rung(0, 2.015))
    assert climbs(tied) and not again(tied)


def test_predictions_follow_the_curves_and_make_the_front_at_the_target(store):
    """Four cascaded trials on L = 1.5 + A C^-0.3: the prediction at T is the curve's value; with three held-out
    rungs the band is uncalibrated."""
    amplitudes = {0: 400.0, 1: 600.0, 2: 800.0, 3: 1000.0}
    for number, a in amplitudes.items():
        start(store, number, "cascaded", 1e5 * (number + 1))
        for r in range(3 if number < 3 else 1):
            c = 1e10 * 3**r
            store.record_rung("s", number, rung(r, 1.5 + a * c**-0.3))
    predictions = predict_search(store.rungs("s"), TARGET)
    for number, a in amplitudes.items():
        p = predictions[number]
        assert p.loss == pytest.approx(1.5 + a * TARGET**-0.3, rel=1e-3)
        assert p.low is None and p.high is None and p.group != NONE
        assert p.rungs == (3 if number < 3 else 1)
        assert (p.loo_error is None) == (number == 3) and (number == 3 or abs(p.loo_error) < 1e-3)
    rows = store.trials("s")
    front = pareto_rows([r for r in at_target(rows, predictions)])
    assert front == []  # none completed yet: fronts hold completed trials only
    assert [r.val_loss for r in at_target(rows, predictions)] == [predictions[n].loss for n in range(4)]


def test_the_front_at_the_target_ranks_by_prediction_and_falls_back_to_measured_losses():
    """Trial 1 is measured worse than 0 at equal cost but predicted better at T: it alone is the front at T."""
    from dataclasses import dataclass

    from nas.answer.target import Prediction, front_at_target

    @dataclass(frozen=True)
    class Row:
        number: int
        val_loss: float
        executed_flops_per_token: float
        status: str = "completed"

    rows = [Row(0, 2.0, 1e6), Row(1, 2.1, 1e6), Row(2, 2.5, 5e5), Row(3, 1.0, 1e6, status="failed")]
    predictions = {n: Prediction(loss, loss, loss, 2, "g", None) for n, loss in {0: 1.9, 1: 1.8, 2: 1.95}.items()}
    assert [(r.number, r.val_loss) for r in front_at_target(rows, predictions)] == [(2, 1.95), (1, 1.8)]
    assert [r.number for r in front_at_target(rows, {})] == [2, 0]  # no rungs: the measured front
    assert front_at_target(rows, {0: predictions[0]}) == [replace(rows[0], val_loss=1.9)]  # unpredicted: never on it


def test_ties_at_the_target_are_judged_by_the_noise_carried_there(store):
    """Predictions at T compress rung differences by the curve's slope (C / T)^alpha; the seed noise is carried
    the same way, so two trials tied at their rung are tied at T and two apart at their rung stay apart."""
    for n, a in enumerate([400.0, 404.0, 600.0, 800.0]):
        start(store, n, "cascaded", 1e5)
        for r in range(3):
            for seed in (0, 1):
                store.record_rung("s", n, rung(r, 1.5 + a * (1e10 * 3**r) ** -0.3 + 0.004 * seed, seed=seed))
    answer = answer_at_target(store.rungs("s"), TARGET)
    assert answer.noise == pytest.approx(0.004 / 2**0.5, rel=1e-6)
    slope = (1e10 * 9 / TARGET) ** answer.exponents[answer.predictions[0].group]
    assert answer.noise_at_target(0) == pytest.approx(answer.noise * slope, rel=1e-9)
    gap = answer.predictions[1].loss - answer.predictions[0].loss
    assert 0 < gap < 2 * answer.noise_at_target(0) and answer.tied(0, 1)  # 4 C^-0.3 apart: within the noise
    assert not answer.tied(0, 2) and not answer.tied(2, 3)
