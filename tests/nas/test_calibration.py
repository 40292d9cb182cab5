"""Calibrated bands: coverage of synthetic predictions of known calibration, split-conformal quantiles, and the
"uncalibrated" answer when a search has too few held-out rungs."""

import math

import numpy as np
import pytest

from nas.answer.calibration import GAMMA, Calibration, calibrate, coverage, min_scores

Z80 = 1.2815515655446004  # the 90th percentile of N(0, 1): a central 80% interval is +/- Z80 sigma


def test_coverage_of_synthetic_predictions_of_known_calibration():
    rng = np.random.default_rng(0)
    truth = {k: float(v) for k, v in enumerate(rng.normal(2.0, 0.1, 4000))}
    sigma = 0.03
    predicted = {k: v + sigma * rng.standard_normal() for k, v in truth.items()}
    right = {k: (p - Z80 * sigma, p + Z80 * sigma) for k, p in predicted.items()}
    narrow = {k: (p - 0.5 * Z80 * sigma, p + 0.5 * Z80 * sigma) for k, p in predicted.items()}
    assert coverage(right, truth) == pytest.approx(0.80, abs=0.02)
    assert coverage(narrow, truth) == pytest.approx(math.erf(0.5 * Z80 / math.sqrt(2)), abs=0.02)  # P(|z| < 0.64)
    assert coverage({0: None, 1: (0.0, 9.0)}, {0: 1.0, 1: 1.0}) == 1.0  # keys without a band are not counted
    assert coverage({}, truth) is None


@pytest.mark.parametrize("gamma", [1.0, 0.5])
def test_conformal_bands_cover_fresh_errors_at_their_level(gamma):
    """Backtest errors whose spread grows as d^gamma with the distance d carried: the band calibrated on 40 of
    them, carried 3x further, covers about 80% of fresh errors at that distance (conformal: >= 80% on average)."""
    rng = np.random.default_rng(1)
    hits = []
    for _ in range(300):
        d = rng.uniform(0.5, 1.2, 40)
        errors = [(0.02 * x**gamma * rng.standard_normal(), 1.0, math.exp(x)) for x in d]
        cal = calibrate(errors, gamma=gamma)
        far = 3.0
        fresh = 0.02 * far**gamma * rng.standard_normal()
        low, high = cal.band(2.0, 1.0, math.exp(far))
        hits.append(low <= 2.0 + fresh <= high)
    assert np.mean(hits) == pytest.approx(0.8, abs=0.05)


def test_the_quantile_is_the_split_conformal_rank_and_few_scores_are_uncalibrated():
    assert min_scores(0.8) == 4 and min_scores(0.9) == 9 and min_scores(0.5) == 1
    errors = [(e, 1.0, math.e) for e in (0.05, -0.01, 0.03, -0.02, 0.04)]  # distance ln(e / 1) = 1: scores = |e|
    cal = calibrate(errors)  # n = 5: the ceil(6 x 0.8) = 5th smallest
    assert cal.q == pytest.approx(0.05) and cal.n == 5 and cal.calibrated
    assert cal.band(2.0, 1e9, 1e9 * math.e**2) == pytest.approx((2.0 - 0.05 * 2**GAMMA, 2.0 + 0.05 * 2**GAMMA))
    few = calibrate(errors[:3])
    assert not few.calibrated and few.band(2.0, 1.0, 10.0) is None
    assert few.describe() == "bands uncalibrated: 3 trials with a held-out rung, 4 needed"
    assert Calibration(0.01, 9).band(0.005, 1.0, math.e) == (0.0, 0.015)  # a loss is never below 0
