"""Each knob's effect at T (`nas.answer.effects`): planted effects recovered with their intervals, knobs the search
did not vary or cannot tell from size reported as not resolved, `nas effects`' table in 120 columns, the export."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest

from nas.answer.effects import Observation, estimate_effects, knobs_of, partial_dependence
from nas.answer.search_effects import param_importances

SPACE = {
    "n_layers": optuna.distributions.IntDistribution(2, 8),
    "residual": optuna.distributions.CategoricalDistribution(["cascaded", "nag", "ancre"]),
    "mlp_ratio": optuna.distributions.CategoricalDistribution([2.0]),
    "lr": optuna.distributions.FloatDistribution(1e-3, 1e-2, log=True),
    "mod_rate": optuna.distributions.CategoricalDistribution([0.0, 0.5]),
}
ANCRE, MOD = 0.05, -0.03  # planted: ancre costs 0.05 nats against cascaded; MoD 0 -> 0.5 saves 0.03 at equal FLOPs


def planted(seed: int, trials: int = 60, band: float = 0.01) -> list[Observation]:
    """A search whose loss at T is a size trend in ln FLOPs, ancre +0.05, MoD 0 -> 0.5 -0.03, nag and lr 0, with
    depth setting the FLOPs exactly (confounded with size); each prediction with an 80% band of +-`band`."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        layers, family = int(rng.choice([2, 4, 8])), str(rng.choice(["cascaded", "nag", "ancre"]))
        mod, lr = float(rng.choice([0.0, 0.5])), float(math.exp(rng.uniform(math.log(1e-3), math.log(1e-2))))
        flops = 1e5 * layers * (1.0 - 0.4 * mod)
        loss = 3.0 - 0.1 * math.log(flops) + ANCRE * (family == "ancre") + MOD * (mod / 0.5)
        knobs = {"n_layers": layers, "residual": family, "mlp_ratio": 2.0, "lr": lr, "mod_rate": mod}
        out.append(Observation(knobs, loss + rng.normal(0.0, 0.01), band / 1.2816, flops, 1e4 * layers))
    return out


def by_step(effects) -> dict:
    return {e.step if e.level else e.knob: e for e in effects.effects}


def test_planted_effects_are_recovered_with_their_signs_and_80_percent_intervals_hold_them():
    """Over 20 searches: the planted signs every time; each 80% interval holds its planted value in at least 60% of
    them (the null effects' intervals hold 0 as often). The bootstrap perturbs each loss within its band on top
    of resampling trials whose scatter already holds that error, so it errs wide, never narrow."""
    held = {"ancre vs cascaded": 0, "mod_rate": 0, "nag vs cascaded": 0, "lr": 0}
    planted_values = {"ancre vs cascaded": ANCRE, "mod_rate": MOD, "nag vs cascaded": 0.0, "lr": 0.0}
    for seed in range(20):
        effects = by_step(estimate_effects(planted(seed), knobs_of(SPACE), "flops", target=1e18))
        ancre, mod = effects["ancre vs cascaded"], effects["mod_rate"]
        assert ancre.resolved and ancre.effect > 0 and mod.resolved and mod.effect < 0
        assert mod.step == "0 -> 0.5" and ancre.level == "ancre" and ancre.reference == "cascaded"
        for step, value in planted_values.items():
            held[step] += effects[step].low <= value <= effects[step].high
    assert all(n >= 12 for n in held.values()), held


def test_a_knob_confounded_with_size_or_held_constant_is_not_resolved():
    effects = by_step(estimate_effects(planted(0), knobs_of(SPACE), "flops"))
    assert effects["n_layers"].reason.startswith("collinear with size") and effects["n_layers"].effect is None
    assert effects["mlp_ratio"].reason == "held constant" and not effects["mlp_ratio"].resolved


@pytest.mark.parametrize("kept", [1, 2])
def test_an_effect_resting_on_two_trials_of_a_level_is_not_resolved_and_says_why(kept):
    """Two trials of a level cannot support an interval: the effect against it is not resolved, with the counts;
    three are enough for the planted effect to be resolved again."""
    rows = [o for o in planted(0) if o.knobs["residual"] != "nag"]
    nags = [o for o in planted(0) if o.knobs["residual"] == "nag"]
    effects = by_step(estimate_effects([*rows, *nags[:kept]], knobs_of(SPACE), "flops"))
    assert not effects["nag vs cascaded"].resolved
    assert effects["nag vs cascaded"].reason.startswith(f"too few trials of a level ({kept} nag")
    assert "an interval needs at least 3 of each" in effects["nag vs cascaded"].reason
    three = by_step(estimate_effects([*rows, *nags[:3]], knobs_of(SPACE), "flops"))
    assert not three["nag vs cascaded"].reason.startswith("too few trials")
    assert effects["ancre vs cascaded"].resolved


def test_wider_bands_widen_the_intervals():
    narrow = by_step(estimate_effects(planted(0, band=0.001), knobs_of(SPACE), "flops"))["ancre vs cascaded"]
    wide = by_step(estimate_effects(planted(0, band=0.2), knobs_of(SPACE), "flops"))["ancre vs cascaded"]
    assert wide.high - wide.low > 2.0 * (narrow.high - narrow.low)


def test_the_sentence_says_which_level_wins_by_how_much_at_what_equal_cost():
    effects = estimate_effects(planted(0), knobs_of(SPACE), "flops")
    words = effects.sentences()
    ancre = [w for w in words if w.startswith("at T, ancre trails cascaded by 0.0")]
    rows = planted(0)
    counts = {f: sum(o.knobs["residual"] == f for o in rows) for f in ("ancre", "cascaded")}
    basis = f"(from {counts['ancre']} ancre and {counts['cascaded']} cascaded trials)"
    assert len(ancre) == 1 and ancre[0].endswith(f"nats at equal FLOPs per token {basis}")  # what it rests on
    assert any(w.startswith("at T, mod_rate 0 -> 0.5 lowers the loss by 0.0") and " trials over " in w for w in words)


def test_importances_come_from_optunas_default_evaluator():
    importances, evaluator = param_importances(planted(0), SPACE)
    assert "PED-ANOVA" in evaluator
    assert set(importances) == set(SPACE) and math.isclose(sum(importances.values()), 1.0)
    assert importances["n_layers"] > importances["lr"]  # depth carries the size trend


def test_partial_dependence_follows_the_planted_mod_effect_per_family():
    rows = planted(0)
    ancre = partial_dependence(rows, knobs_of(SPACE), "mod_rate", "ancre", points=3)
    cascaded = partial_dependence(rows, knobs_of(SPACE), "mod_rate", None, points=3)
    assert [x for x, _ in ancre] == [0.0, 0.25, 0.5]
    assert ancre[0][1] - cascaded[0][1] == pytest.approx(ANCRE, abs=0.02)
    assert partial_dependence(rows, knobs_of(SPACE), "residual", None) == []


def test_bad_at_equal_names_the_accepted_values():
    with pytest.raises(ValueError, match="at_equal must be one of flops, params, shape"):
        estimate_effects(planted(0), knobs_of(SPACE), "tokens")


@pytest.fixture(scope="module")
def planted_store(tmp_path_factory) -> str:
    from planted_search import planted_search

    url = f"sqlite:///{tmp_path_factory.mktemp('effects') / 'planted.db'}"
    planted_search(url)
    return url


def run_nas(*args: str):
    from typer.testing import CliRunner

    from nas.cli.commands import app

    return CliRunner().invoke(app, list(args))


def test_nas_effects_fits_in_120_columns_and_finds_the_planted_family_effect(planted_store):
    from rich.console import Console

    from nas.cli.effects_table import effects_report, load_effects
    from nas.store import Store
    from planted_search import ANCRE_EFFECT

    with Store(planted_store) as store:
        found = load_effects(store, "planted", "flops")
    ancre = by_step(found)["ancre vs cascaded"]
    assert ancre.resolved and ancre.low <= ANCRE_EFFECT <= ancre.high and ancre.importance is not None
    assert by_step(found)["d_model"].reason.startswith("follows from size and n_layers")
    assert by_step(found)["n_layers"].step == "x2, d_model following"  # depth against width at equal FLOPs
    table, lines = effects_report("planted", found)
    console = Console(width=120, record=True, force_terminal=False)
    console.print(table)
    for line in lines:
        console.print(line)
    text = console.export_text()
    assert all(len(line) <= 120 for line in text.splitlines()), max(map(len, text.splitlines()))
    assert "ancre vs cascaded" in text and "at T, ancre trails cascaded by 0.0" in text


def test_nas_effects_command_prints_the_table_and_names_bad_input(planted_store):
    result = run_nas("effects", "planted", "--at-equal", "params", "--storage", planted_store)
    assert result.exit_code == 0, result.output
    assert "at equal parameters" in result.output and "80% interval" in result.output
    bad = run_nas("effects", "planted", "--at-equal", "tokens", "--storage", planted_store)
    assert bad.exit_code == 2 and bad.output.strip() == "error: --at-equal must be one of flops, params, not 'tokens'"
    low = run_nas("effects", "planted", "--target-flops", "1e5", "--storage", planted_store)
    assert low.exit_code == 2 and low.output.startswith("error: --target-flops must be above the search's top rung")
    missing = run_nas("effects", "nope", "--storage", planted_store)
    assert missing.exit_code == 2 and missing.output.startswith("error:") and "nope" in missing.output


def test_nas_effects_reads_the_same_importances_without_importing_scikit_learn(planted_store):
    """`nas effects` in a fresh process never imports scikit-learn (Optuna's importance package would, for its
    fANOVA), and prints what this process prints with scikit-learn imported: the same importances."""
    import subprocess
    import sys

    pytest.importorskip("sklearn")
    args = ["effects", "planted", "--storage", planted_store]
    here = run_nas(*args)
    fresh = subprocess.run([sys.executable, "-X", "importtime", "-m", "nas.cli", *args], capture_output=True, text=True)
    assert fresh.returncode == 0 and here.exit_code == 0, fresh.stderr
    imported = [line.split("|")[-1].strip() for line in fresh.stderr.splitlines() if line.startswith("import time:")]
    assert "optuna.importance" in imported
    assert not any(name.startswith("sklearn.") and name != "sklearn.ensemble" for name in imported)
    assert fresh.stdout == here.output and "PED-ANOVA" in fresh.stdout


def test_nas_export_writes_the_effects_beside_the_configs(planted_store, tmp_path):
    import json

    from nas.export import export_configs
    from nas.store import Store

    with Store(planted_store) as store:
        paths = export_configs(store, "planted", tmp_path / "out", pareto=True)
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert paths and index["effects"]["at_equal"] == "flops" and index["effects"]["trials"] == 40
    ancre = next(e for e in index["effects"]["effects"] if e["step"] == "ancre vs cascaded")
    assert ancre["resolved"] and ancre["low"] <= 0.05 <= ancre["high"]
    assert any(line.startswith("at T, ancre trails cascaded") for line in index["effects"]["in_words"])


def test_too_few_trials_for_every_knob_at_once_fits_each_knob_alone_with_size():
    rows = planted(3, trials=12)  # 4 knob terms, 2 size terms and an intercept want 14 trials at once
    effects = estimate_effects(rows, knobs_of(SPACE), "flops")
    assert any("each knob fitted alone with size" in note for note in effects.notes)
    ancre = by_step(effects)["ancre vs cascaded"]
    assert ancre.effect is not None and ancre.low < ancre.high
    assert by_step(effects)["mod_rate"].effect is not None


def looped_bootstrap(rows, size, columns, noise, seed: int, draws: int) -> np.ndarray:
    """The bootstrap one draw at a time (`effects._bootstrap`'s definition): resample, perturb, skip a draw whose
    varied columns are rank-deficient, and fit by `np.linalg.lstsq` with tau^2 by moments."""

    def wls(design, y, weights):
        root = np.sqrt(weights)
        return np.linalg.lstsq(design * root[:, None], y * root, rcond=None)[0]

    rng = np.random.default_rng(seed)
    design = np.column_stack([np.ones(size.shape[0]), size, *columns])
    y, sd = np.array([o.loss for o in rows]), np.array([o.sd for o in rows])
    n, first = len(y), 1 + size.shape[1]
    out = np.full((draws, design.shape[1] - first), np.nan)
    for b in range(draws):
        pick = rng.integers(0, n, n)
        d, target = design[pick], y[pick] + rng.normal(0.0, 1.0, n) * sd[pick]
        varied = np.ptp(d, axis=0) > 0
        varied[0] = True
        if np.linalg.matrix_rank(d[:, varied]) < varied.sum():
            continue
        dv = d[:, varied]
        residual = target - dv @ wls(dv, target, np.ones(n))
        tau2 = max(0.0, float(residual @ residual) / max(1, n - dv.shape[1]) - float(np.mean(sd[pick] ** 2)))
        coef = np.full(design.shape[1], np.nan)
        coef[varied] = wls(dv, target, 1.0 / np.maximum(sd[pick] ** 2 + tau2, 1e-12))
        out[b] = coef[first:]
    return out


@pytest.mark.parametrize("trials", [12, 60])
def test_the_batched_bootstrap_gives_the_draws_and_intervals_of_fitting_one_draw_at_a_time(trials):
    """Same seed, same draws: every coefficient of every draw within rounding of the one-at-a-time fit, NaN in the
    same draws (12 trials leave a level out of some draws, so their designs differ), and so the same intervals."""
    from nas.answer.effects import _bootstrap, _size_columns, knob_terms

    rows = planted(1, trials=trials)
    knobs = [k for k in knobs_of(SPACE) if k.name in ("residual", "mod_rate", "lr")]
    columns = [c for k in knobs for _, c, _ in knob_terms(k, rows)]
    size = _size_columns(rows, "flops")
    batched, looped = _bootstrap(rows, size, columns, None, 7, 400), looped_bootstrap(rows, size, columns, None, 7, 400)
    assert np.array_equal(np.isnan(batched), np.isnan(looped))
    if trials == 12:
        assert np.isnan(looped).any() and not np.isnan(looped).all()  # some draws leave a level out
    np.testing.assert_allclose(batched, looped, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        np.nanpercentile(batched, [10, 90], axis=0), np.nanpercentile(looped, [10, 90], axis=0), rtol=1e-9, atol=1e-12
    )
