"""One error model: its 80% band covers a synthetic truth near its nominal rate, its calls are right at least as
often as it claims, an offset the corpora disagree on is shrunk, and the parts two trials share are counted once."""

import math

import numpy as np
import pytest

from nas.answer.discrepancy import BiasPrior, fit_discrepancy
from nas.answer.error_model import CALL_Z, ErrorModel, TrialFacts, band, measured_model, resolved

PRIOR = BiasPrior(0.03, 0.01, {"nag": 0.05, "ancre": 0.02}, "synthetic", family_sd={"nag": 0.005, "ancre": 0.03})
MODEL = ErrorModel(PRIOR, {"cascaded": 0.8, "nag": 1.2, "ancre": 1.8}, 1.2, seed_noise=0.02)
S = math.log(2.0)


def facts(rng, n=40):
    families = ("cascaded", "nag", "ancre")
    return [TrialFacts(families[i % 3], float(rng.uniform(-4.0, -1.0)), S, 1 + i % 2) for i in range(n)]


def draw_errors(rng, trials, centre, noise):
    """One corpus's errors as the model describes them: beta and each family's offset drawn once for the corpus
    (their spread across corpora), then each trial's seed noise and misfit."""
    beta = rng.normal(0.0, MODEL.bias.beta_sd)
    offset = {f: rng.normal(0.0, MODEL.bias.family_sd.get(f, 0.0)) for f in ("cascaded", "nag", "ancre")}
    out = []
    for f in trials:
        own = rng.normal(0.0, noise / math.sqrt(f.seeds)) + rng.normal(0.0, MODEL.misfit_ratio[f.family] * noise)
        out.append(f.distance * (beta * (f.aspect - centre) + offset[f.family]) + own)
    return np.array(out)


def test_the_80_percent_band_covers_a_synthetic_truth_near_its_nominal_rate():
    rng = np.random.default_rng(0)
    hits = []
    for _ in range(300):
        trials = facts(rng)
        centre = float(np.mean([f.aspect for f in trials]))
        errors = draw_errors(rng, trials, centre, 0.02)
        for f, e in zip(trials, errors, strict=True):
            sd = math.sqrt(MODEL.relative_variance(f, centre, 0.02))
            low, high = band(2.0 + e, sd)
            hits.append(low <= 2.0 <= high)
    assert 0.75 <= np.mean(hits) <= 0.85


def test_calls_are_right_at_least_as_often_as_the_model_claims():
    """A gap is resolved beyond 1.645 sd of its error: on synthetic corpora with true gaps spread around zero, at
    least 95% of the resolved calls have the true sign, and the shared parts are what keeps it so."""
    rng = np.random.default_rng(1)
    right, calls, naive_right, naive_calls = 0, 0, 0, 0
    for _ in range(200):
        trials = facts(rng, 12)
        centre = float(np.mean([f.aspect for f in trials]))
        true = rng.normal(0.0, 0.04, len(trials))
        seen = true + draw_errors(rng, trials, centre, 0.02)
        for i in range(len(trials)):
            for j in range(i + 1, len(trials)):
                gap, true_gap = seen[i] - seen[j], true[i] - true[j]
                if resolved(gap, MODEL.gap_variance(trials[i], trials[j], centre, 0.02)):
                    calls, right = calls + 1, right + (gap * true_gap > 0)
                if abs(gap) > 2 * 0.02 * math.sqrt(2):  # twice the seed noise of the gap alone
                    naive_calls, naive_right = naive_calls + 1, naive_right + (gap * true_gap > 0)
    assert calls > 100 and right / calls >= 0.95
    assert naive_right / naive_calls < right / calls  # the seed noise alone claims too much


def test_an_offset_the_corpora_disagree_on_is_shrunk_and_one_they_agree_on_is_kept():
    assert PRIOR.applied_family("nag") == pytest.approx(0.05 * 0.05**2 / (0.05**2 + 0.005**2))
    assert PRIOR.applied_family("nag") > 0.049  # agreed: nearly whole
    assert PRIOR.applied_family("ancre") == pytest.approx(0.02 * 0.02**2 / (0.02**2 + 0.03**2))
    assert PRIOR.applied_family("ancre") < 0.01  # disputed: shrunk by more than half
    assert PRIOR.applied_family("cascaded") == 0.0
    assert BiasPrior(0.0, 0.01, {"nag": 0.05}).applied_family("nag") == 0.05  # no spread measured: whole
    correction, _ = fit_discrepancy([], noise=0.02, prior=PRIOR, centre=-2.0).correction(-2.0, "ancre", S)
    assert correction == pytest.approx(-S * PRIOR.applied_family("ancre"))  # the offset as applied, not as measured


def test_the_parts_two_trials_share_are_counted_once():
    a, b = TrialFacts("nag", -2.0, S), TrialFacts("nag", -2.0, S)
    same = MODEL.gap_variance(a, b, centre=-1.0, noise=0.02)
    apart = MODEL.relative_variance(a, -1.0, 0.02) + MODEL.relative_variance(b, -1.0, 0.02)
    assert same < apart  # the same family at the same shape shares beta's and the offset's parts: only seeds and misfit
    own = 0.02**2 * 2 + 2 * (MODEL.misfit_ratio["nag"] * 0.02) ** 2
    assert same == pytest.approx(own)
    other = MODEL.gap_variance(a, TrialFacts("ancre", -2.0, S), centre=-1.0, noise=0.02)
    misfits = (MODEL.misfit_ratio["nag"] * 0.02) ** 2 + (MODEL.misfit_ratio["ancre"] * 0.02) ** 2
    offsets = (PRIOR.family_sd["nag"] * S) ** 2 + (PRIOR.family_sd["ancre"] * S) ** 2  # two families: both spreads
    assert other == pytest.approx(0.02**2 * 2 + misfits + offsets)
    assert resolved(CALL_Z * 1.01, 1.0) and not resolved(CALL_Z * 0.99, 1.0)


def test_the_shipped_model_reads_its_constants():
    model = measured_model()
    assert model.bias.beta_sd > 0 and set(model.bias.family) == set(model.bias.family_sd) == {"nag", "ancre"}
    assert model.level.alpha > 0 and model.level.alpha_sd > 0 and model.seed_noise > 0
    assert set(model.misfit_ratio) == {"cascaded", "nag", "ancre"} and model.call_z == pytest.approx(CALL_Z)


def test_a_handful_of_repeats_does_not_set_the_seed_noise_alone():
    """The study's noise s on nu degrees of freedom pools with the measured sigma_0 on nu_0: a few repeats that
    happen to agree leave it near sigma_0, many repeats move it to s, and without repeats it is sigma_0."""
    model = ErrorModel(seed_noise=0.02, seed_noise_dof=16.0)
    assert model.noise(None, 0) == model.noise(0.005, 0) == 0.02
    few, many = model.noise(0.005, 3), model.noise(0.005, 3000)
    assert few == pytest.approx(math.sqrt((16 * 0.02**2 + 3 * 0.005**2) / 19))
    assert 0.017 < few < 0.02 and many == pytest.approx(0.005, rel=0.05)
    assert ErrorModel(seed_noise=0.02).noise(0.005, 3) == pytest.approx(0.005)  # no weight measured: the study's own
    assert measured_model().seed_noise_dof > 0


def test_seed_noise_counts_its_degrees_of_freedom():
    from nas.answer.extrapolate import RungPoint, seed_noise, seed_noise_dof

    points = [RungPoint(t, "cascaded", 1e9, 2.0 + 0.01 * s * (-1) ** t, s) for t in range(4) for s in range(t % 3 + 1)]
    assert seed_noise_dof(points) == sum(t % 3 for t in range(4))  # (seeds - 1) per repeated rung: 0 + 1 + 2 + 0
    assert seed_noise(points) is not None and seed_noise_dof(points[:1]) == 0


def test_a_top_rung_shorter_than_any_the_model_was_measured_on_is_named(tmp_path):
    """The model knows top rungs of at least `top_rung_steps` optimizer steps: a trial whose top rung took fewer
    says so in its basis (the export's and the JSON's) and in one line of what the answer rests on; the others and
    a model that records no such bound say nothing."""
    from nas.answer.decisions import Architecture, rests_on
    from nas.answer.forecast import Forecasting, forecast_at_target
    from nas.store import Store, default_url
    from workers.training.records import RungRecord

    shapes = {0: (2, 64), 1: (4, 64), 2: (6, 64)}
    families = {0: "cascaded", 1: "nag", 2: "ancre"}
    steps = {0: 500, 1: 50, 2: 400}
    top, target = 1e11, 1e12
    with Store(default_url(tmp_path)) as store:
        store.create_search("s", requested_trials=3, budget={}, space={}, settings={}, optuna_study_name=None,
                            code_version=None)  # fmt: skip
        for t in shapes:
            store.start_trial("s", number=t, config={"residual": families[t]})
            for seed in (0, 1):
                loss = 2.0 + 0.1 * t + 0.01 * seed
                store.record_rung("s", t, RungRecord(0, seed, top, steps[t] + seed, 1, loss, top, None, 32, 1, 20.0,
                                                     20.0, True))  # fmt: skip
        rows = store.rungs("s")
    archs = {t: Architecture(families[t], *shapes[t]) for t in shapes}
    flops, params = {t: 1e5 for t in shapes}, {t: 1e5 * (t + 1) for t in shapes}

    def answer(model: ErrorModel):
        found = forecast_at_target(rows, target, Forecasting(shapes, families, top, top, model))
        return found, [line for line in rests_on(found, [], archs, flops, params) if line.startswith("range: ")]

    bounded = ErrorModel(PRIOR, {"cascaded": 0.8, "nag": 1.2, "ancre": 1.8}, 1.2, seed_noise=0.02, top_rung_steps=400)
    found, lines = answer(bounded)
    assert [t for t, f in found.facts.items() if not bounded.measured_at(f)] == [1] and found.facts[1].steps == 50
    assert "took 50 optimizer steps" in found.predictions[1].basis
    assert all("optimizer steps" not in found.predictions[t].basis for t in (0, 2))
    assert lines == [
        "range: trial 1 trained its top rung in 50 optimizer steps, fewer than any top rung the error model was "
        "measured on (400): its band and calls are not calibrated there"
    ]
    found, lines = answer(MODEL)  # no bound recorded: nothing said
    assert lines == [] and all("optimizer steps" not in p.basis for p in found.predictions.values())
    assert MODEL.measured_at(TrialFacts("nag", -2.0, S, 1, None)) and not bounded.measured_at(
        TrialFacts("nag", -2.0, S, 1, 399)
    )


def test_the_shipped_bound_on_top_rung_steps_is_the_fewest_the_fidelity_tables_hold():
    from benchmarks.harness import read_table
    from benchmarks.trust import fidelity_tables as fidelity

    per_step = fidelity.RUN["batch_size"] * fidelity.FIXED["seq_len"]
    fewest = min(int(r["tokens"]) // per_step for c in fidelity.CORPORA.values() if fidelity.ready(c)
                 for r in read_table(c.replica_runs))  # fmt: skip
    assert measured_model().top_rung_steps == fewest > 0
