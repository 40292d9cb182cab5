"""Loss extrapolation to a far larger budget: L = E + A_i C^-alpha_f fitted on synthetic rungs with known truth."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from nas.answer.extrapolate import NONE, STUDY, RungPoint, fit_study, seed_noise

C0 = 1e15
RUNGS = [C0 * 3.0**r for r in range(4)]  # eta = 3
T = 100 * RUNGS[-1]
FAMILIES = {"cascaded": (0.3, 1.8), "nag": (0.45, 1.8), "ancre": (0.6, 1.8)}  # family -> (alpha, E); E is the data's


@dataclass(frozen=True)
class Truth:
    family: str
    E: float
    A: float
    alpha: float

    def loss(self, flops: float) -> float:
        return self.E + self.A * flops**-self.alpha


def make_study(noise=0.0, seed=0, *, trials=5, single=0, families=FAMILIES, rungs=RUNGS):
    """`trials` trials per family with every rung and `single` with the lowest only; loss excess 1-2 nats at C0."""
    rng = np.random.default_rng(seed)
    points, truth = [], {}
    for family, (alpha, e) in families.items():
        for i in range(trials + single):
            trial = len(truth)
            truth[trial] = Truth(family, e, rng.uniform(1.0, 2.0) * C0**alpha, alpha)
            for c in rungs if i < trials else rungs[:1]:
                points.append(RungPoint(trial, family, c, truth[trial].loss(c) + noise * rng.standard_normal()))
    return points, truth


def rel_err(fit, truth, trial, flops=T) -> float:
    return abs(fit.predict(trial, flops) - truth[trial].loss(flops)) / truth[trial].loss(flops)


def test_noise_free_curves_are_recovered_exactly():
    points, truth = make_study()
    fit = fit_study(points)
    for family, (alpha, e) in FAMILIES.items():
        assert fit.groups[family].alpha == pytest.approx(alpha, abs=1e-6)
        assert fit.groups[family].E == pytest.approx(e, abs=1e-6)
    for trial, t in truth.items():
        e, a, alpha, group = fit.params(trial)
        assert group == t.family
        assert a == pytest.approx(t.A, rel=1e-4)
        assert rel_err(fit, truth, trial) < 1e-7
        assert fit.predict(trial, RUNGS[1]) == pytest.approx(t.loss(RUNGS[1]), rel=1e-9)


def test_noisy_curves_are_recovered_within_tolerance():
    points, truth = make_study(noise=0.005, seed=1)
    fit = fit_study(points)
    for family, (alpha, e) in FAMILIES.items():
        assert abs(fit.groups[family].alpha - alpha) < 0.04
        assert abs(fit.groups[family].E - e) < 0.08
    assert max(rel_err(fit, truth, trial) for trial in truth) < 0.02


@pytest.mark.parametrize("noise, tol", [(0.0, 1e-7), (0.005, 0.02)])
def test_trials_seen_at_the_lowest_rung_only_use_their_family(noise, tol):
    points, truth = make_study(noise=noise, seed=2, single=3)
    fit = fit_study(points)
    singles = [t for t in truth if sum(p.trial == t for p in points) == 1]
    assert len(singles) == 9
    for trial in singles:
        family = truth[trial].family
        assert fit.params(trial)[3] == family
        assert trial in fit.groups[family].members and trial not in fit.groups[family].fit_trials
        assert rel_err(fit, truth, trial) < tol


def test_a_family_with_too_few_curves_shares_the_study_parameters():
    shared = {"cascaded": (0.4, 1.9), "nag": (0.4, 1.9)}
    points, truth = make_study(families=shared)
    lonely, lonely_truth = make_study(seed=3, trials=1, single=2, families={"ancre": (0.4, 1.9)})
    offset = len(truth)
    points += [RungPoint(p.trial + offset, p.family, p.flops, p.loss) for p in lonely]
    truth.update({t + offset: t_ for t, t_ in lonely_truth.items()})
    fit = fit_study(points)
    assert set(fit.groups) == {"cascaded", "nag", STUDY}
    assert fit.groups[STUDY].members == (10, 11, 12)
    assert fit.groups[STUDY].fit_trials == tuple(range(11))  # every multi-rung trial of the study
    for trial in truth:
        assert fit.params(trial)[3] == (STUDY if trial >= offset else truth[trial].family)
        assert rel_err(fit, truth, trial) < 1e-7
    own = fit_study(points, min_trials=1)  # one curve of 4 rungs leaves 1 degree of freedom: enough
    assert own.params(offset)[3] == "ancre" and own.params(offset + 1)[3] == "ancre"


def test_a_study_without_enough_curves_predicts_the_last_loss():
    points = [
        RungPoint(0, "nag", RUNGS[0], 3.0),
        RungPoint(1, "nag", RUNGS[0], 3.2),
        RungPoint(1, "nag", RUNGS[0], 3.4, 1),
    ]
    points += [RungPoint(2, "ancre", c, 3.0 - 0.2 * r) for r, c in enumerate(RUNGS[:3])]  # 3 points, 3 parameters
    fit = fit_study(points)
    assert fit.groups == {}
    for trial, last in [(0, 3.0), (1, 3.3), (2, 2.6)]:
        assert fit.predict(trial, T) == pytest.approx(last)
        assert fit.params(trial)[:3] == pytest.approx((last, 0.0, 0.0))
        assert fit.params(trial)[3] == NONE
    more = points + [RungPoint(3, "ancre", c, 3.1 - 0.25 * r) for r, c in enumerate(RUNGS[:3])]
    assert fit_study(more).params(0)[3] == STUDY  # 6 points, 4 parameters: fitted over the study


def test_reanchored_levels_rest_on_the_weighted_rungs_and_keep_the_curve():
    """With all the weight on a trial's top rung, its curve passes through that rung's loss exactly (the curve's E
    and exponent unchanged); with the weight on the lowest, through the lowest; equal weights give the fit."""
    points, truth = make_study(noise=0.01, seed=3)
    fit = fit_study(points)
    top = fit.reanchored(lambda trial, flops: float(flops == RUNGS[-1]))
    low = fit.reanchored(lambda trial, flops: float(flops == RUNGS[0]))
    same = fit.reanchored(lambda trial, flops: 1.0)
    measured = {(p.trial, p.flops): p.loss for p in points}
    for trial in truth:
        assert top.predict(trial, RUNGS[-1]) == pytest.approx(measured[(trial, RUNGS[-1])], rel=1e-9)
        assert low.predict(trial, RUNGS[0]) == pytest.approx(measured[(trial, RUNGS[0])], rel=1e-9)
        assert same.predict(trial, T) == pytest.approx(fit.predict(trial, T), rel=1e-9)
        assert top.params(trial)[2::2] == fit.params(trial)[2::2] and top.params(trial)[0] == fit.params(trial)[0]
    # at one rung, the ranking at T is that rung's
    order_top = sorted(truth, key=lambda t: measured[(t, RUNGS[-1])])
    family = {t: truth[t].family for t in truth}
    for f in FAMILIES:
        mine = [t for t in order_top if family[t] == f]
        assert sorted(mine, key=lambda t: top.predict(t, T)) == mine
    with pytest.raises(ValueError, match="weights"):
        fit.reanchored(lambda trial, flops: -1.0)


def test_seed_noise_pools_the_spread_between_seeds():
    groups = [[3.0, 3.1], [2.5, 2.8, 2.6]]
    points = [RungPoint(i, "nag", RUNGS[i], loss, seed=s) for i, g in enumerate(groups) for s, loss in enumerate(g)]
    points += [RungPoint(5, "nag", RUNGS[0], 9.0)]  # no repeat: no contribution
    expected = math.sqrt(sum(np.var(g, ddof=1) * (len(g) - 1) for g in groups) / sum(len(g) - 1 for g in groups))
    assert seed_noise(points) == pytest.approx(expected)
    assert seed_noise(points + [RungPoint(0, "nag", RUNGS[0], 3.2, seed=1)]) == pytest.approx(
        math.sqrt((np.var([3.0, 3.15], ddof=1) + np.var(groups[1], ddof=1) * 2) / 3)
    )  # the same seed twice is one run (averaged)
    rng = np.random.default_rng(8)
    many = [
        RungPoint(t, "nag", RUNGS[0], 3.0 + t + 0.03 * rng.standard_normal(), seed=s)
        for t in range(200)
        for s in range(3)
    ]
    assert seed_noise(many) == pytest.approx(0.03, rel=0.1)
    assert seed_noise([RungPoint(0, "nag", c, 3.0) for c in RUNGS]) is None
    assert seed_noise([]) is None


def test_non_finite_losses_are_ignored():
    points, truth = make_study(noise=0.005, seed=9, single=1)
    clean = fit_study(points)
    junk = [RungPoint(0, "cascaded", RUNGS[-1], math.nan, seed=1), RungPoint(5, "cascaded", RUNGS[2], math.inf)]
    junk += [RungPoint(99, "nag", c, math.nan) for c in RUNGS]
    fit = fit_study(junk + points)
    assert seed_noise(junk + points) is None
    for trial in truth:
        assert fit.predict(trial, T) == pytest.approx(clean.predict(trial, T), rel=1e-12)
        assert fit.params(trial)[3] == clean.params(trial)[3]
    assert (
        fit.params(5)[3] == "cascaded" and 5 not in fit.groups["cascaded"].fit_trials
    )  # one rung still: the inf rung does not count
    with pytest.raises(KeyError, match="trial 99"):
        fit.predict(99, T)


@pytest.mark.parametrize(
    "points, match",
    [
        ([], "no point with a finite loss"),
        ([RungPoint(0, "nag", C0, math.nan)], "no point with a finite loss"),
        ([RungPoint(0, "nag", -1.0, 3.0)], "flops must be finite and > 0"),
        ([RungPoint(0, "nag", C0, 3.0), RungPoint(0, "ancre", 3 * C0, 2.9)], "family 'ancre'"),
        ([RungPoint(0, STUDY, C0, 3.0)], "reserved"),
    ],
)
def test_bad_input_raises_a_one_line_value_error(points, match):
    with pytest.raises(ValueError, match=match) as err:
        fit_study(points)
    assert "\n" not in str(err.value)


def test_bad_flops_raise():
    fit = fit_study(make_study()[0])
    with pytest.raises(ValueError, match="flops"):
        fit.predict(0, 0.0)
