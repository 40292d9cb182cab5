"""Grading apart from size on synthetic truths of known structure: size rules from the stored counts, the
architecture figures of a ranking, and a planted bias found by family."""

import math

import numpy as np
import pytest

from benchmarks.trust.architecture import architecture_grade, bias, size_baselines, truth_ceilings
from benchmarks.trust.grading import Truth
from nas.answer.decisions import Architecture

FAMILY_EFFECT = {"cascaded": 0.0, "nag": -0.06, "ancre": 0.06}
SHAPES = [(2, 32), (4, 32), (2, 64), (4, 48), (6, 32), (3, 64), (6, 48), (8, 32)]


def _synthetic(noise: float = 0.005, seed: int = 0):
    """Every family at every shape: loss = 3 - 0.2 ln N + the family's effect, two seeds of Gaussian noise."""
    rng = np.random.default_rng(seed)
    archs, runs, params, flops, expected = {}, {}, {}, {}, {}
    for i, (family, (depth, width)) in enumerate((f, s) for s in SHAPES for f in FAMILY_EFFECT):
        archs[i] = Architecture(residual=family, n_layers=depth, d_model=width, n_heads=2)
        params[i] = 12 * depth * width**2 + 256 * width + (64 if family != "cascaded" else 0)
        flops[i] = 2.0 * params[i]
        expected[i] = 3.0 - 0.2 * math.log(params[i]) + FAMILY_EFFECT[family]
        runs[i] = [expected[i] + noise * rng.standard_normal() for _ in range(2)]
    return Truth(1e15, runs, flops, params, 1e16), archs, expected


def test_size_rules_are_read_from_the_stored_counts():
    truth, _, _ = _synthetic()
    tokens = {c: 20.0 * n for c, n in truth.params.items()}  # every config exactly at 20 tokens per parameter
    rules = size_baselines(truth, tokens)
    bigger, smallest = rules["parameters (bigger better)"], rules["pick the smallest (fewest parameters)"]
    assert bigger["kendall_tau"] > 0.5 and smallest["kendall_tau"] == pytest.approx(-bigger["kendall_tau"])
    largest = max(truth.params, key=truth.params.get)
    assert bigger["regret_nats"] == pytest.approx(truth.loss[largest] - min(truth.loss.values()))
    assert rules["FLOPs per token (bigger better)"]["kendall_tau"] == pytest.approx(bigger["kendall_tau"])


def test_a_size_only_ranking_has_no_architecture_and_the_expected_loss_has_it_all():
    truth, archs, expected = _synthetic()
    size_only = {c: 3.0 - 0.2 * math.log(truth.params[c]) for c in truth.params}
    blind, sighted = architecture_grade(size_only, truth, archs), architecture_grade(expected, truth, archs)
    assert abs(blind["architecture_tau"]) < 0.15 and blind["kendall_tau"] > 0.7
    assert sighted["architecture_tau"] > 0.8
    family = sighted["decisions_by_kind"]["family"]
    assert family["resolvable"] >= 16 and family["accuracy"] == 1.0
    assert blind["decisions_by_kind"]["family"]["accuracy"] < 0.6
    ceiling = truth_ceilings(truth, archs)
    assert ceiling["architecture_tau"] > 0.6 and ceiling["resolvable_contrasts"]["family"] == family["resolvable"]


def test_a_bias_by_family_is_found_and_exceeds_the_seed_noise():
    truth, archs, expected = _synthetic()
    biased = {c: x + (0.04 if archs[c].residual == "nag" else 0.0) for c, x in expected.items()}
    found = bias(biased, truth, archs, noise=0.005)
    by_family = found["mean_by"]["family"]
    assert by_family["nag"] - by_family["cascaded"] == pytest.approx(0.04, abs=0.01)
    assert found["residual_sd"] > 3 * found["expected_from_seed_noise"]
    unbiased = bias(expected, truth, archs, noise=0.005)
    assert unbiased["residual_sd"] < 2 * unbiased["expected_from_seed_noise"]


def test_the_ceiling_against_the_seed_mean_is_what_a_perfect_predictor_reaches_there():
    """A continuous architecture effect per config, seed noise of a third of its spread: the noise-corrected
    ceilings against the mean of two seeds match what the expected loss itself scores, above seed against seed."""
    rng = np.random.default_rng(3)
    shapes = [(d, w) for d in (2, 3, 4, 6, 8, 12) for w in (32, 48, 64, 96)]
    archs, runs, params, flops, expected = {}, {}, {}, {}, {}
    for i, (family, (depth, width)) in enumerate((f, s) for s in shapes for f in FAMILY_EFFECT):
        archs[i] = Architecture(residual=family, n_layers=depth, d_model=width, n_heads=2)
        params[i] = 12 * depth * width**2 + 256 * width
        flops[i] = 2.0 * params[i]
        expected[i] = 3.0 - 0.2 * math.log(params[i]) + 0.03 * rng.standard_normal()
        runs[i] = [expected[i] + 0.01 * rng.standard_normal() for _ in range(2)]
    truth = Truth(1e15, runs, flops, params, 1e16)
    ceiling, perfect = truth_ceilings(truth, archs), architecture_grade(expected, truth, archs)
    mean = ceiling["for_the_seed_mean"]
    assert mean["architecture_tau"] > ceiling["architecture_tau"]
    assert mean["architecture_tau"] == pytest.approx(perfect["architecture_tau"], abs=0.08)
    assert mean["kendall_tau"] == pytest.approx(perfect["kendall_tau"], abs=0.08)
    assert mean["decision_accuracy"] >= perfect["decision_accuracy"] - 0.05
