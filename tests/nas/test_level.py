"""The level at T: the curve recovers a planted floor and exponent from three configs at three budgets, carries a
top rung to T as the planted curve does, refuses what cannot support a curve, and a search's answer carries every
trial's top rung with it on a real store."""

import math

import numpy as np
import pytest

from nas.answer.error_model import ErrorModel
from nas.answer.forecast import Forecasting, forecast_at_target
from nas.answer.level import LevelCurve, LevelPoint, LevelPrior, NoCurve, fit_level
from nas.store import Store, default_url
from workers.training.records import RungRecord
from workers.trial.result import TrialResult

E, ALPHA, T, TOP = 1.2, 0.23, 1e13, 1e12
AMPLITUDES = {0: 0.9, 1: 1.3, 2: 1.7, 3: 1.1, 4: 1.5}  # L_i(C) = E + A_i (C / T)^-alpha


def loss(trial: int, flops: float) -> float:
    return E + AMPLITUDES[trial] * (flops / T) ** -ALPHA


def planted(configs=(0, 1, 2), budgets=(TOP / 4, TOP / 3), noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    points = [LevelPoint(t, c, loss(t, c) + rng.normal(0.0, noise)) for t in configs for c in budgets]
    top = {t: LevelPoint(t, TOP, loss(t, TOP) + rng.normal(0.0, noise)) for t in configs}
    return points, top


WIDE = LevelPrior(alpha=0.15, alpha_sd=0.5)  # a prior far off and loose: the points decide


def test_the_curve_recovers_a_planted_floor_and_exponent_from_three_configs_at_three_budgets():
    points, top = planted()
    curve = fit_level(points, top, noise=1e-4, prior=WIDE)
    assert isinstance(curve, LevelCurve)
    assert curve.alpha == pytest.approx(ALPHA, abs=0.006) and curve.floor == pytest.approx(E, abs=0.02)
    for trial in AMPLITUDES:  # every trial's top rung carried to T, those the curve never saw too
        mean, sd = curve.carry(loss(trial, TOP), T)
        assert mean == pytest.approx(loss(trial, T), abs=0.005) and sd < 0.01


def test_a_tight_prior_holds_the_exponent_and_the_points_still_set_the_floor():
    points, top = planted()
    held = LevelPrior(alpha=ALPHA, alpha_sd=1e-3)
    curve = fit_level(points, top, noise=1e-3, prior=held)
    assert isinstance(curve, LevelCurve) and curve.alpha == pytest.approx(ALPHA, abs=0.003)
    assert curve.floor == pytest.approx(E, abs=0.01)


def test_a_config_off_the_shared_curve_widens_the_level_instead_of_pinning_the_exponent():
    """One config whose loss falls four times as fast as the others' (an unstable run) at a quarter and a third of
    the top rung: with the likelihood's sd the seed noise alone the posterior follows it far from its prior; with
    the scatter about the best curve it stays near the prior, and the level's sd widens."""
    points, top = planted(budgets=(TOP / 4, TOP / 3))
    steep = [LevelPoint(p.trial, p.flops, p.loss + (0.6 if p.flops == TOP / 4 else 0.4) * (p.trial == 2))
             for p in points]  # fmt: skip
    prior = LevelPrior(alpha=ALPHA, alpha_sd=0.08)
    clean, off = fit_level(points, top, 0.01, prior), fit_level(steep, top, 0.01, prior)
    assert isinstance(clean, LevelCurve) and isinstance(off, LevelCurve)
    assert abs(off.alpha - ALPHA) < 2 * prior.alpha_sd  # the prior still holds it
    assert off.carry(loss(0, TOP), T)[1] > 2 * clean.carry(loss(0, TOP), T)[1]  # and the level says it is unsure


def test_two_points_or_one_config_support_no_curve():
    points, top = planted(configs=(0,))
    assert isinstance(fit_level(points, top, 0.01, WIDE), NoCurve)  # one config: no shared floor
    two, top = planted(configs=(0, 1), budgets=())
    refused = fit_level(two, top, 0.01, WIDE)
    assert isinstance(refused, NoCurve) and "below the top rung" in refused.reason
    one_each, top = planted(configs=(0, 1), budgets=(TOP / 4,))
    assert isinstance(fit_level(one_each, top, 0.01, WIDE), LevelCurve)  # 4 points, 3 parameters: one left


def test_the_top_rungs_offset_is_taken_out_and_its_sd_carried():
    points, top = planted()
    shifted = {t: LevelPoint(t, p.flops, p.loss + 0.05) for t, p in top.items()}
    offset = LevelPrior(alpha=0.15, alpha_sd=0.5, offset=0.05, offset_sd=0.01, systematic_sd=0.02)
    curve = fit_level(points, shifted, noise=1e-4, prior=offset)
    assert isinstance(curve, LevelCurve)
    mean, sd = curve.carry(loss(3, TOP) + 0.05, T)
    assert mean == pytest.approx(loss(3, T), abs=0.005)
    assert sd >= math.hypot(0.02, 0.01 * curve.factor(T)) - 1e-9


def test_the_posterior_sd_covers_the_noise_of_its_points():
    """With noisy points the carried level misses by about what its sd says (over 200 planted searches, the 80%
    band of the level holds the planted value 75-95% of the time; without E's own variance it falls to about 70%)."""
    hits = []
    for seed in range(200):
        points, top = planted(noise=0.02, seed=seed)
        curve = fit_level(points, top, noise=0.02, prior=LevelPrior(alpha=ALPHA, alpha_sd=0.05))
        assert isinstance(curve, LevelCurve)
        mean, sd = curve.carry(loss(4, TOP), T)
        hits.append(abs(mean - loss(4, T)) <= 1.2816 * sd)
    assert 0.75 <= np.mean(hits) <= 0.95


def rung(store, trial, rung_index, seed, flops, width, value):
    record = RungRecord(rung_index, seed, flops, 1, 100, value, flops, d_model=width, params=1000, on_path=True)
    store.record_rung("s", trial, record)


def test_a_searchs_answer_carries_every_top_rung_to_t_with_the_level_configs(tmp_path):
    shapes = {t: (2 + t, 64) for t in AMPLITUDES}
    families = dict.fromkeys(AMPLITUDES, "cascaded")
    model = ErrorModel(level=LevelPrior(alpha=0.2, alpha_sd=0.1), seed_noise=0.01)
    with Store(default_url(tmp_path)) as store:
        store.create_search(
            "s", requested_trials=5, budget={}, space={}, settings={}, optuna_study_name=None, code_version=None
        )
        for t in AMPLITUDES:
            tid = store.start_trial("s", number=t, config={"residual": "cascaded"})
            rung(store, t, 0, 0, TOP, 32, loss(t, TOP))
            store.finish_trial(tid, TrialResult.loss_only(loss(t, TOP), 1.0))
        forecasting = Forecasting(shapes, families, TOP, TOP, model, offset_applies=False)
        alone = forecast_at_target(store.rungs("s"), T, forecasting)
        for t in (0, 2, 4):  # the level configs, at a quarter and a third of the top rung
            for k, share in enumerate((1 / 4, 1 / 3)):
                rung(store, t, k - 2, 0, TOP * share, 16, loss(t, TOP * share))
        answer = forecast_at_target(store.rungs("s"), T, forecasting)
    assert isinstance(alone.level, NoCurve) and not alone.at_target
    assert all(alone.predictions[t].loss == pytest.approx(loss(t, TOP)) for t in AMPLITUDES)  # the top rung's
    assert isinstance(answer.level, LevelCurve) and answer.at_target
    for t, p in answer.predictions.items():
        assert p.loss == pytest.approx(loss(t, T), abs=0.01) and p.rungs == 1
        assert p.low is not None and p.high is not None and p.low < p.loss < p.high
        assert p.relative_sd is not None and p.sd is not None and p.sd >= p.relative_sd
