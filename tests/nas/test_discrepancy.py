"""Anchors: a planted bias in depth over width is recovered from a few anchors and taken out; none, no change."""

import math

import numpy as np
import pytest

from nas.answer.decisions import kendall
from nas.answer.discrepancy import (
    Anchor,
    Anchoring,
    aspect,
    choose_anchors,
    compute_distance,
    fit_discrepancy,
    width_distance,
)
from nas.answer.target import answer_at_target
from nas.store import Store, default_url

SHAPES = {i: (layers, width) for i, (layers, width) in enumerate(
    [(2, 96), (3, 64), (4, 64), (4, 48), (6, 64), (8, 48), (8, 32), (12, 32), (2, 64), (6, 32), (4, 32), (3, 96)]
)}  # fmt: skip
BETA = 0.05  # nats per unit of z per unit of narrowing distance: the replica judges deep, narrow targets too poorly
TOP_S, ANCHOR_S = math.log(2.0), 0.0  # the top rung at d_T / 2, the anchor at d_T


def truth(trial: int) -> float:
    layers, width = SHAPES[trial]
    return 1.9 - 0.02 * math.log(layers * width * width / 1e4) + 0.004 * (trial % 3)


def measured(trial: int, s: float, shift: float, noise: float, rng) -> float:
    return truth(trial) + shift + BETA * aspect(*SHAPES[trial]) * s + rng.normal(0.0, noise)


def test_anchors_at_the_extremes_of_depth_over_width_recover_the_planted_slope():
    rng = np.random.default_rng(0)
    top = {t: measured(t, TOP_S, 0.3, 0.003, rng) for t in SHAPES}
    aspects = {t: aspect(*SHAPES[t]) for t in SHAPES}
    chosen = choose_anchors(aspects, top, 2)
    contenders = sorted(top, key=top.get)[:6]
    assert set(chosen) <= set(contenders) and len(chosen) == 2
    assert aspects[chosen[0]] == max(aspects[t] for t in contenders)
    assert aspects[chosen[1]] == min(aspects[t] for t in contenders)
    anchors = [Anchor(t, aspects[t], top[t], measured(t, ANCHOR_S, 0.1, 0.003, rng), TOP_S, ANCHOR_S) for t in chosen]
    fit = fit_discrepancy(anchors, noise=0.003)
    assert fit.beta == pytest.approx(BETA, abs=0.015)
    corrected = {t: top[t] + fit.correction(aspects[t], TOP_S)[0] for t in SHAPES}
    true = {t: truth(t) for t in SHAPES}
    assert kendall(corrected, true) > kendall(top, true) + 0.2 and kendall(corrected, true) > 0.8


def test_without_two_anchors_nothing_is_corrected_and_few_noisy_ones_are_shrunk_toward_zero():
    none = fit_discrepancy([], noise=0.01)
    assert none.correction(-1.0, TOP_S) == (0.0, 0.0) and "no anchors" in none.describe()
    one = fit_discrepancy([Anchor(0, -3.0, 2.0, 1.9, TOP_S, 0.0)], noise=0.01)
    assert one.correction(-1.0, TOP_S) == (0.0, 0.0)
    # two anchors close in z, noisy: the slope they suggest (0.1 / 0.1 = 1 nat per unit) is mostly shrunk away
    close = [Anchor(0, -2.0, 2.0, 1.9, TOP_S, 0.0), Anchor(1, -1.9, 2.0, 2.0, TOP_S, 0.0)]
    weak = fit_discrepancy(close, noise=0.05, prior_sd=0.05)
    assert abs(weak.slope) < 0.1 and weak.slope_sd == pytest.approx(0.05, rel=0.05)
    far = fit_discrepancy([Anchor(0, -4.0, 2.0, 1.9, TOP_S, 0.0), Anchor(1, -1.0, 2.0, 1.6, TOP_S, 0.0)], noise=0.005)
    assert far.slope == pytest.approx(-0.1, abs=0.005) and far.slope_sd < 0.005


def rung_row(store, trial: int, rung: int, seed: int, budget: float, width: int, loss: float) -> None:
    store.record_rung(
        "s",
        trial,
        seed,
        {
            "rung": rung, "budget_flops": budget, "steps": 1, "tokens": 1, "val_loss": loss, "training_flops": budget,
            "d_model": width, "params": 1, "tokens_per_param": 20.0, "target_tokens_per_param": 20.0, "on_path": True,
        },
    )  # fmt: skip


def test_the_answer_takes_the_anchors_discrepancy_out_of_every_prediction_on_a_real_store(tmp_path):
    """Every trial at one rung (d_T / 2, T / 10), two of them also at T / 3 at d_T: the answer ranks by the top rung
    until anchored, and by the truth once the planted slope is taken out."""
    rng = np.random.default_rng(1)
    target, top = 1e13, 1e12
    with Store(default_url(tmp_path)) as store:
        store.create_search(
            "s", requested_trials=12, budget={}, space={}, settings={}, optuna_study_name=None, code_version=None
        )
        for t, (_, width) in SHAPES.items():
            tid = store.start_trial("s", number=t, config={"residual": "cascaded"})
            for seed in (0, 1000):
                rung_row(store, t, 0, seed, top, width // 2, measured(t, TOP_S, 0.3, 0.002, rng))
            store.finish_trial(tid, {"status": "completed", "val_loss": 2.0, "executed_flops_per_token": 1.0})
        anchoring = Anchoring(SHAPES, top)
        plain = answer_at_target(store.rungs("s"), target)
        aspects = {t: aspect(*SHAPES[t]) for t in SHAPES}
        for t in choose_anchors(aspects, {t: p.loss for t, p in plain.predictions.items()}, 2):
            rung_row(store, t, 1, 0, target / 3, SHAPES[t][1], measured(t, ANCHOR_S, 0.1, 0.002, rng))
        rows = store.rungs("s")
    anchored = answer_at_target(rows, target, anchoring)
    true = {t: truth(t) for t in SHAPES}
    assert plain.discrepancy is None and anchored.discrepancy is not None and len(anchored.discrepancy.anchors) == 2
    assert anchored.discrepancy.beta == pytest.approx(BETA, abs=0.02)
    before = kendall({t: p.loss for t, p in plain.predictions.items()}, true)
    after = kendall({t: p.loss for t, p in anchored.predictions.items()}, true)
    assert after > before + 0.2
    # read as compute, the same anchors lie ln(T / C_top) - ln(T / C_a) = ln(10 / 3) apart
    by_compute = answer_at_target(rows, target, Anchoring(SHAPES, top, compute_distance(target)))
    assert by_compute.discrepancy is not None and by_compute.discrepancy.span == pytest.approx(math.log(10 / 3))
    assert width_distance(rows[0], SHAPES[rows[0].number][1]) == pytest.approx(TOP_S)


def test_what_the_answer_rests_on_says_what_the_anchors_corrected_and_by_how_much():
    from nas.answer.decisions import Architecture, rests_on
    from nas.answer.discrepancy import Discrepancy

    anchors = (Anchor(0, -1.0, 2.0, 1.9, TOP_S, 0.0), Anchor(7, -3.0, 2.0, 1.7, TOP_S, 0.0))
    fit = fit_discrepancy(list(anchors), noise=0.002)
    # the difference anchor - top rises by 0.1 per unit of z: the top rung's error against T falls by 0.1
    assert isinstance(fit, Discrepancy) and fit.top_rung_slope[0] == pytest.approx(-0.1, abs=0.005)
    from nas.answer.target import Answer

    answer = Answer({}, None, None, discrepancy=fit)  # type: ignore[arg-type]
    line = rests_on(answer, [], {0: Architecture("cascaded", 2, 64)}, {0: 1.0}, {0: 1.0})[0]
    assert line.startswith("anchors: 2 anchors (trials 0, 7): the top rung's error grows by -0.100 ± ")
    assert line.endswith("nats per unit of ln(depth/width); taken out of every prediction")
