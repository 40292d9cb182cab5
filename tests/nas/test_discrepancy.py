"""The top rung's bias: a planted bias in family and depth over width is taken out by its prior, recovered from a
few anchors, left alone without either; the answer on a real store carries it."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from nas.answer.decisions import Architecture, kendall, rests_on
from nas.answer.discrepancy import (
    NO_PRIOR,
    Anchor,
    BiasPrior,
    aspect,
    choose_anchors,
    compute_distance,
    fit_discrepancy,
    width_distance,
)
from nas.answer.error_model import ErrorModel, measured_model
from nas.answer.forecast import Forecasting, forecast_at_target
from nas.answer.target import Answer, answer_at_target
from nas.store import Store, default_url
from workers.training.records import RungRecord
from workers.trial.result import TrialResult

SHAPES = {i: (layers, width) for i, (layers, width) in enumerate(
    [(2, 96), (3, 64), (4, 64), (4, 48), (6, 64), (8, 48), (8, 32), (12, 32), (2, 64), (6, 32), (4, 32), (3, 96)]
)}  # fmt: skip
FAMILIES = {i: ("cascaded", "nag", "ancre")[i % 3] for i in SHAPES}
BETA, PHI = 0.05, {"nag": 0.04, "ancre": 0.02}  # per unit of narrowing distance: the replica favours cascaded
TOP_S, ANCHOR_S = math.log(2.0), 0.0  # the top rung at d_T / 2, the anchor at d_T
PLANTED = BiasPrior(BETA, 0.01, PHI, "planted")


def truth(trial: int) -> float:
    layers, width = SHAPES[trial]
    return 1.9 - 0.02 * math.log(layers * width * width / 1e4) + 0.004 * (trial % 4)


def measured(trial: int, s: float, shift: float, noise: float, rng) -> float:
    bias = BETA * aspect(*SHAPES[trial]) + PHI.get(FAMILIES[trial], 0.0)
    return truth(trial) + shift + s * bias + rng.normal(0.0, noise)


def anchor(t: int, top: float, rng) -> Anchor:
    at_anchor = measured(t, ANCHOR_S, 0.1, 0.003, rng)
    return Anchor(t, aspect(*SHAPES[t]), top, at_anchor, TOP_S, ANCHOR_S, FAMILIES[t])


def corrected(top: dict[int, float], fit) -> dict[int, float]:
    return {t: x + fit.correction(aspect(*SHAPES[t]), FAMILIES[t], TOP_S)[0] for t, x in top.items()}


def test_the_prior_takes_the_planted_bias_out_and_nothing_is_corrected_without_one():
    rng = np.random.default_rng(0)
    top = {t: measured(t, TOP_S, 0.3, 0.002, rng) for t in SHAPES}
    true = {t: truth(t) for t in SHAPES}
    centre = float(np.mean([aspect(*s) for s in SHAPES.values()]))
    none = fit_discrepancy([], noise=0.002, prior=NO_PRIOR, centre=centre)
    assert none.correction(-1.0, "nag", TOP_S) == (0.0, 0.0) and "no anchors" in none.describe()
    by_prior = fit_discrepancy([], noise=0.002, prior=PLANTED, centre=centre)
    assert kendall(corrected(top, by_prior), true) > kendall(top, true) + 0.3 > 0.3
    assert kendall(corrected(top, by_prior), true) > 0.9


def test_anchors_at_the_extremes_of_depth_over_width_recover_the_slope_the_prior_lacks():
    rng = np.random.default_rng(1)
    top = {t: measured(t, TOP_S, 0.3, 0.003, rng) for t in SHAPES}
    aspects = {t: aspect(*SHAPES[t]) for t in SHAPES}
    chosen = choose_anchors(aspects, top, 4)
    contenders = sorted(top, key=top.get)[:6]
    assert set(chosen) <= set(contenders) and len(chosen) == 4
    assert aspects[chosen[0]] == max(aspects[t] for t in contenders)
    assert aspects[chosen[1]] == min(aspects[t] for t in contenders)
    flat = BiasPrior(0.0, 0.1, PHI, "family only")  # the family offsets known, the slope not
    fit = fit_discrepancy([anchor(t, top[t], rng) for t in chosen], noise=0.003, prior=flat)
    assert fit.beta == pytest.approx(BETA, abs=0.015) and fit.beta_sd < 0.01
    assert fit.anchors and "moved by 4 anchors" in fit.describe()


def test_few_noisy_anchors_close_in_depth_over_width_leave_the_prior_nearly_as_it_was():
    close = [Anchor(0, -2.0, 2.0, 1.9, TOP_S, 0.0), Anchor(1, -1.9, 2.0, 2.0, TOP_S, 0.0)]
    weak = fit_discrepancy(close, noise=0.05, prior=PLANTED)
    assert weak.beta == pytest.approx(BETA, abs=0.005)
    same_width = [Anchor(0, -4.0, 2.0, 1.9, TOP_S, TOP_S), Anchor(1, -1.0, 2.0, 1.6, TOP_S, TOP_S)]
    assert fit_discrepancy(same_width, noise=0.001, prior=PLANTED).beta == BETA  # no nearer the target: no say


def rung_row(store, trial: int, rung: int, seed: int, budget: float, width: int, loss: float) -> None:
    record = RungRecord(rung, seed, budget, 1, 1, loss, budget, None, width, 1, 20.0, 20.0, True)
    store.record_rung("s", trial, record)


def test_the_answer_takes_the_bias_out_of_every_prediction_on_a_real_store(tmp_path):
    """Every trial at one rung (d_T / 2, T / 10), four of them also at T / 3 at d_T: the answer ranks by the top rung
    until told the bias, and by the truth once the prior and the anchors take it out."""
    rng = np.random.default_rng(2)
    target, top = 1e13, 1e12
    with Store(default_url(tmp_path)) as store:
        store.create_search(
            "s", requested_trials=12, budget={}, space={}, settings={}, optuna_study_name=None, code_version=None
        )
        for t, (_, width) in SHAPES.items():
            tid = store.start_trial("s", number=t, config={"residual": FAMILIES[t]})
            for seed in (0, 1000):
                rung_row(store, t, 0, seed, top, width // 2, measured(t, TOP_S, 0.3, 0.002, rng))
            store.finish_trial(tid, TrialResult.loss_only(2.0, 1.0))
        plain = answer_at_target(store.rungs("s"), target)
        aspects = {t: aspect(*SHAPES[t]) for t in SHAPES}
        for t in choose_anchors(aspects, {t: p.loss for t, p in plain.predictions.items()}, 4):
            rung_row(store, t, 1, 0, target / 3, SHAPES[t][1], measured(t, ANCHOR_S, 0.1, 0.002, rng))
        rows = store.rungs("s")
    flat = ErrorModel(BiasPrior(0.0, 0.1, PHI, "family only"))
    anchored = forecast_at_target(rows, target, Forecasting(SHAPES, FAMILIES, top, top, flat))
    true = {t: truth(t) for t in SHAPES}
    assert plain.discrepancy is None and anchored.discrepancy is not None
    assert len(anchored.discrepancy.anchors) == 4 and anchored.discrepancy.beta == pytest.approx(BETA, abs=0.02)
    before = kendall({t: p.loss for t, p in plain.predictions.items()}, true)
    after = kendall({t: p.loss for t, p in anchored.predictions.items()}, true)
    assert after > before + 0.2
    # read as compute, the same anchors lie ln(T / C_top) - ln(T / C_a) = ln(10 / 3) apart
    by_compute = forecast_at_target(
        rows, target, Forecasting(SHAPES, FAMILIES, top, top, flat, distance=compute_distance(target))
    )
    assert by_compute.discrepancy is not None
    assert by_compute.discrepancy.anchors[0].span == pytest.approx(math.log(10 / 3))
    assert width_distance(rows[0], SHAPES[rows[0].number][1]) == pytest.approx(TOP_S)


def test_what_the_answer_rests_on_says_what_was_taken_out_and_from_what():
    fit = fit_discrepancy([], noise=0.002, prior=PLANTED, centre=-2.0)
    answer = Answer({}, None, None, discrepancy=fit)  # type: ignore[arg-type]
    line = rests_on(answer, [], {0: Architecture("cascaded", 2, 64)}, {0: 1.0}, {0: 1.0})[0]
    half = math.log(2.0)
    assert line.startswith(f"bias: the top rung's error taken out: {half * BETA:+.3f} ± ")
    assert f"family offsets ancre {half * PHI['ancre']:+.3f}, nag {half * PHI['nag']:+.3f} nats" in line
    assert line.endswith("from the prior measured on planted, no anchors")


def test_the_shipped_prior_is_the_one_the_benchmark_measured():
    results = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "forecast_constants.json"
    prior = measured_model().bias
    assert prior.beta_sd > 0 and set(prior.family) == {"nag", "ancre"}
    shipped = json.loads(results.read_text())["shipped"]
    assert prior.source == shipped["source"]
    assert (prior.beta, prior.beta_sd, dict(prior.family), dict(prior.family_sd), prior.misfit) == (
        shipped["bias"]["beta"], shipped["bias"]["beta_sd"], shipped["bias"]["family"],
        shipped["bias"]["family_sd"], shipped["bias"]["misfit"],
    )  # fmt: skip
    package = Path(__file__).resolve().parents[2] / "nas" / "answer" / "forecast_constants.json"
    assert json.loads(package.read_text()) == shipped  # every constant a search reads, not the bias alone
