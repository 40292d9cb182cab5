"""Size against architecture: the size trend, the architecture tau, contrasts at matched cost and their decision
accuracy, and the lines saying what a search's answer rests on, on tables and searches of known structure."""

import math

import pytest

from helpers import measured_rung
from nas.answer.decisions import (
    Architecture,
    Contrast,
    architecture_tau,
    contrast_kind,
    decision_accuracy,
    differences,
    kendall,
    matched_contrasts,
    rests_on,
    size_trend,
)
from nas.answer.target import answer_at_target
from nas.store import Store, default_url
from workers.training.records import RungRecord
from workers.trial.contract import CountedCosts
from workers.trial.result import TrialResult

FAMILIES = ("cascaded", "nag", "ancre")
EFFECT = {"cascaded": 0.0, "nag": 0.06, "ancre": -0.04}  # a planted family effect, nats
SIZES = (4e4, 8e4, 1.6e5, 3.2e5)


def x(params: float) -> float:
    return math.log(params) - 10.0


def table():
    """Every family at four sizes: configs -> (family, params); the truth is a quadratic in ln N plus the family's
    effect."""
    configs = {i: (f, n) for i, (f, n) in enumerate((f, n) for n in SIZES for f in FAMILIES)}
    params = {c: n for c, (_, n) in configs.items()}
    truth = {c: 2.5 - 0.15 * x(n) + 0.01 * x(n) ** 2 + EFFECT[f] for c, (f, n) in configs.items()}
    return configs, params, truth


def test_the_size_trend_recovers_a_quadratic_in_log_parameters():
    params = {i: n for i, n in enumerate((1e4, 3e4, 1e5, 3e5, 1e6))}
    losses = {i: 3.0 - 0.2 * math.log(n) + 0.01 * math.log(n) ** 2 for i, n in params.items()}
    trend = size_trend(losses, params)
    assert trend.coefficients == pytest.approx((3.0, -0.2, 0.01), abs=1e-6) and trend.r2 == pytest.approx(1.0)
    assert all(abs(r) < 1e-9 for r in trend.residuals(losses, params).values())
    assert size_trend({0: 1.0, 1: 2.0}, {0: 1e4, 1: 2e4}) is None  # too few configs to fit


def test_pure_size_has_no_architecture_tau_and_a_planted_family_effect_is_found():
    configs, params, truth = table()
    size_only = {c: 2.4 - 0.1 * x(params[c]) - 0.01 * x(params[c]) ** 3 for c in configs}  # knows sizes only
    assert kendall(size_only, truth) > 0.3  # it ranks the sizes: raw tau credits it
    assert architecture_tau(size_only, truth, params) == pytest.approx(0.0, abs=1e-12)
    knows_family = {c: truth[c] + 0.001 * ((c * 7) % 5 - 2) / 2 for c in configs}
    assert architecture_tau(knows_family, truth, params) > 0.8
    flipped = {c: truth[c] - 2 * EFFECT[configs[c][0]] for c in configs}  # ranks the families backwards
    assert architecture_tau(flipped, truth, params) < -0.5


def test_contrast_kinds_and_what_matched_cost_admits():
    a = Architecture("cascaded", 4, 64, 2, 4.0)
    assert contrast_kind(a, Architecture("nag", 4, 64, 2, 4.0)) == "family"
    assert contrast_kind(a, Architecture("cascaded", 8, 48, 2, 4.0)) == "depth vs width"
    assert contrast_kind(a, Architecture("cascaded", 4, 64, 2, 4.0, 0.5, 2, "block")) == "MoD"
    assert contrast_kind(a, Architecture("cascaded", 6, 48, 2, 4.0, 0.5, 2, "block")) == "MoD"
    assert contrast_kind(a, Architecture("ancre", 8, 48, 2, 4.0)) == "mixed"
    assert contrast_kind(a, a) is None  # the same architecture (configs differing in lr only): no decision
    archs = {0: a, 1: Architecture("nag", 4, 64, 2, 4.0), 2: Architecture("cascaded", 8, 48, 2, 4.0)}
    flops = {0: 1.00e6, 1: 1.14e6, 2: 1.20e6}
    assert matched_contrasts(archs, flops) == [Contrast(0, 1, "family"), Contrast(1, 2, "mixed")]  # 0-2: 20% apart


def test_decision_accuracy_counts_resolvable_contrasts_only():
    configs, params, truth = table()
    archs = {c: Architecture(f, 4, 64 if n < 1e5 else 96) for c, (f, n) in configs.items()}
    flops = {c: 2.0 * params[c] for c in configs}
    contrasts = matched_contrasts(archs, flops)
    assert {c.kind for c in contrasts} == {"family"}  # the sizes are 2x apart: only families are matched
    right = decision_accuracy(contrasts, truth, truth, margin=0.03)
    assert right["family"]["contrasts"] == 12 and right["family"]["resolvable"] == 12  # gaps 0.04-0.10 > 0.03
    assert right["all"]["accuracy"] == 1.0 and right["all"]["standard_error"] == 0.0
    flipped = {c: truth[c] - 2 * EFFECT[configs[c][0]] for c in configs}
    assert decision_accuracy(contrasts, flipped, truth, margin=0.03)["family"]["accuracy"] == 0.0
    strict = decision_accuracy(contrasts, truth, truth, margin=0.05)  # cascaded-ancre (0.04) no longer resolvable
    assert (
        strict["family"]["resolvable"] == 8 and strict["MoD"]["resolvable"] == 0 and strict["MoD"]["accuracy"] is None
    )


def rung(r: int, loss: float, seed: int = 0) -> RungRecord:
    return measured_rung(r, loss, 1e10 * 3**r, seed)


def search(tmp_path, levels: dict[int, float]):
    """A search whose trials climb 3 rungs on L = level + 400 C^-0.3, two seeds 0.004 apart; returns its answer."""
    with Store(default_url(tmp_path)) as store:
        store.create_search(
            "s", requested_trials=6, budget={}, space={}, settings={}, optuna_study_name=None, code_version=None
        )
        for n, level in levels.items():
            tid = store.start_trial("s", number=n, config={"residual": "cascaded"}, costs=CountedCosts(1.0))
            for r in range(3):
                for seed in (0, 1):
                    store.record_rung("s", n, rung(r, level + 400 * (1e10 * 3**r) ** -0.3 + 0.004 * seed, seed))
            store.finish_trial(tid, TrialResult.loss_only(level, 1.0))
        return answer_at_target(store.rungs("s"), 1e15)


ARCHS = {
    0: Architecture("cascaded", 4, 64),
    1: Architecture("nag", 4, 64),
    2: Architecture("cascaded", 8, 96),
    3: Architecture("nag", 8, 96),
}
FLOPS = {0: 1.0e6, 1: 1.05e6, 2: 2.0e6, 3: 2.1e6}
PARAMS = {0: 2e5, 1: 2e5, 2: 8e5, 3: 8e5}


def test_a_search_whose_order_is_size_says_so_and_calls_its_matched_rivals_tied(tmp_path):
    answer = search(tmp_path, {0: 2.00, 1: 2.001, 2: 1.90, 3: 1.9005})  # the families differ by less than the noise
    lines = rests_on(answer, [0, 2], ARCHS, FLOPS, PARAMS)
    assert lines[0].startswith("explained by size within the noise")
    tied = [line for line in lines if line.startswith("tied at matched cost")]
    assert len(tied) == 1 and "trial 2 (cascaded 8x96) vs trial 3 (nag 8x96), family (residual differs)" in tied[0]
    assert tied[0].endswith("the cheaper one, trial 2, is the choice")


def test_a_mixed_contrast_names_every_knob_that_differs():
    a, b = Architecture("cascaded", 4, 32, 2, 2.0, 0.875, 2), Architecture("ancre", 4, 32, 2, 4.0, 0.875, 1)
    assert contrast_kind(a, b) == "mixed" and differences(a, b) == ["residual", "mlp_ratio", "mod_every"]


def test_a_search_with_a_family_effect_calls_it_resolved_and_beyond_size(tmp_path):
    answer = search(tmp_path, {0: 2.00, 1: 2.00 - 0.02, 2: 1.90, 3: 1.90 - 0.02})  # nag better by 0.02 at T
    lines = rests_on(answer, [1, 3], ARCHS, FLOPS, PARAMS)
    assert lines[0].startswith("beyond size")
    resolved = [line for line in lines if line.startswith("resolved at matched cost")]
    assert len(resolved) == 1 and "trial 3 is better by" in resolved[0] and "trial 2 is not the choice" in resolved[0]


def test_a_front_member_above_the_size_trend_is_said_to_sit_a_positive_distance_above_it(tmp_path):
    answer = search(tmp_path, {0: 2.00, 1: 2.00 - 0.04, 2: 1.90, 3: 1.90 - 0.04})  # cascaded worse by 0.04 at T
    line = rests_on(answer, [0, 2], ARCHS, FLOPS, PARAMS)[0]
    assert line.startswith("beyond size") and "of 4 trials" in line
    distance = float(line.split(" sits ")[1].split(" nats ")[0])
    assert distance > 0 and " nats above it " in line
