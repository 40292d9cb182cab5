"""Width advice compares like with like: a slope per family, within groups of equal depth and MoD rate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dashboard.width_advice import WidthPoint, width_advice

WIDTHS = (64, 96, 128, 192)


def family_points(family, slope, intercepts, noise=0.0, seed=0):
    """d_align = exp(intercept_g) * d_model^slope per (n_layers, mod_rate) group, times log-normal noise."""
    rng = np.random.default_rng(seed)
    return [
        WidthPoint(family, depth, mod, d, math.exp(c + slope * math.log(d) + noise * rng.standard_normal()))
        for (depth, mod), c in intercepts.items()
        for d in WIDTHS
    ]


def test_a_known_slope_is_recovered_per_family_whatever_the_group_offsets():
    points = family_points("nag", 0.8, {(2, 0.0): 1.0, (6, 0.25): 4.0})
    points += family_points("cascaded", -0.5, {(4, 0.0): -3.0, (8, 0.5): -6.0, (2, 0.0): 0.0})
    advice = width_advice(points)
    assert advice["nag"].slope == pytest.approx(0.8, abs=1e-9) and advice["nag"].stderr == pytest.approx(0, abs=1e-6)
    assert advice["cascaded"].slope == pytest.approx(-0.5, abs=1e-9)
    assert (advice["nag"].n_points, advice["nag"].n_groups, advice["nag"].widths) == (8, 2, WIDTHS)
    noisy = width_advice(family_points("ancre", 0.6, {(2, 0.0): 0.0, (4, 0.0): 2.0, (6, 0.5): -1.0}, 0.1, seed=1))
    a = noisy["ancre"]
    assert abs(a.slope - 0.6) < 3 * a.stderr and 0.02 < a.stderr < 0.3  # the standard error is honest
    assert "supported" in a.verdict and "not supported" not in a.verdict


def test_pooled_points_across_families_do_not_make_the_advice():
    """Wide trials happen to be NAG (d_align ~ 100), narrow ones cascaded (~ 0.05): one slope over all of
    them says "wider is supported", but within each family d_align shrinks with width."""
    points = family_points("cascaded", -0.5, {(4, 0.0): -1.0})[:2]  # widths 64, 96
    points += family_points("cascaded", -0.5, {(2, 0.0): -0.5})[:2]
    points += family_points("nag", -0.5, {(4, 0.0): 7.0})[2:]  # widths 128, 192
    points += family_points("nag", -0.5, {(2, 0.0): 7.5})[2:]
    x = np.log([p.d_model for p in points])
    y = np.log([p.d_align for p in points])
    assert np.polyfit(x, y, 1)[0] > 2  # the pooled slope: strongly "supported"
    advice = width_advice(points)
    for family in ("cascaded", "nag"):
        assert advice[family].slope == pytest.approx(-0.5)
        assert "not supported" in advice[family].verdict and "4 trials in 2 group(s)" in advice[family].verdict


def test_too_little_to_go_on_gives_no_advice_and_says_why():
    one_width_per_group = [WidthPoint("nag", depth, 0.0, 64 * depth, 10.0 * depth) for depth in (1, 2, 3, 4)]
    advice = width_advice(one_width_per_group)["nag"]
    assert advice.slope is None and "no two trials of equal depth and MoD rate" in advice.verdict
    three = family_points("nag", 0.8, {(2, 0.0): 0.0})[:3]
    advice = width_advice(three)["nag"]
    assert advice.slope is None and advice.n_points == 3 and "need at least 4" in advice.verdict
    assert width_advice(three, min_points=3)["nag"].slope == pytest.approx(0.8)
    junk = [WidthPoint("nag", 2, 0.0, 64, math.nan), WidthPoint("nag", 2, 0.0, 96, 0.0)]
    assert width_advice(junk) == {}
    flat = family_points("ancre", 0.02, {(2, 0.0): 0.0, (4, 0.0): 1.0}, 0.05, seed=2)
    assert "no clear trend" in width_advice(flat)["ancre"].verdict
