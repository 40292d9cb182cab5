"""Are the knob effects `nas effects` reports at T right? Graded against the configs trained for real at T.

On each corpus of `make fidelity` (its committed tables), the same effects (`nas.answer.effects.estimate_effects`)
are estimated twice over the same configs:

- **From the truth**: each config's loss at T is the mean of its two seeds (`benchmarks.trust.grading.Truth`).
- **From the answer as a search runs it**: the replica table at the search's default layout, with its anchors,
  replayed through the search's own rung gate (`benchmarks.trust.grading.SearchReplay`, as
  `benchmarks.trust.fidelity` replays it), each config's predicted loss at T with its calibrated band, in `ORDERS`
  arrival orders.

The effects graded: the residual family (nag, ancre against cascaded) and MoD (rate 0 -> its maximum; whole blocks
against sublayers) at equal executed FLOPs per token, where the family barely moves the FLOPs, so width and depth
are held too (family at equal shape); depth against width (depth x2, width following) at equal parameters.

**Resolvable**: a truth effect whose magnitude exceeds twice its seed noise, the sd of the truth effect over
`SEED_REDRAWS` redraws of every config's mean loss within its seed noise, N(0, Truth.noise^2 / seeds) (the truth
effect is nearly linear in the losses, so this is its standard error from seed-to-seed variation alone).

**Graded**, each effect counted once: of the effects the truth resolves, how many the answer resolves too (goal:
at least half), and of those how many it signs as the truth does (goal >= 90%); the share of all graded effects
whose truth value lies in the answer's 80% interval (goal 70-90%). In the table's arrival order (what one search
answers), and each figure's mean over the `ORDERS` arrival orders (not counts pooled across them). A baseline
without a search, graded alike: the same effects from every config's top replica rung alone (T/10, seed 0).

    python -m benchmarks.trust.effects_grading            # writes benchmarks/results/effects.json (make effects)
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import optuna

from nas.answer.calibration import BAND_LEVEL
from nas.answer.effects import Observation, estimate_effects, knobs_of
from nas.answer.error_model import NO_MODEL

from ..harness import machine_info, read_table, write_json
from .fidelity import DEFAULT_ANCHORS, DEFAULT_LAYOUT, DEFAULT_LEVEL_CONFIGS, LAYOUTS, layout_budgets
from .fidelity_tables import CORPORA, configs
from .forecast_constants import held_out_models
from .grading import ORDERS, Truth, graded_rows, losses_at
from .replay import SearchReplay
from .replay_grading import arrival_orders

HERE = Path(__file__).resolve().parents[1]  # benchmarks/: its data/ and results/
OUT = HERE / "results" / "effects.json"
SEED_REDRAWS = 200  # redraws of the truth's means within their seed noise: the truth effects' seed-noise sd
GOALS = {"sign_agreement": 0.9, "answer_resolves_share_of_the_truths": 0.5, "interval_coverage": [0.7, 0.9]}
# (the fit's size held fixed, the knob): the effects graded
GRADED = (("flops", "residual"), ("flops", "mod_rate"), ("flops", "mod_granularity"), ("params", "n_layers"))


def config_knobs(corpus: str, truth: Truth) -> dict[int, dict]:
    """Each graded config's knobs, as `benchmarks.trust.fidelity_tables.configs` built it."""
    built = configs(False, corpus)
    keys = ("residual", "n_layers", "d_model", "mod_rate", "mod_granularity")
    return {c: {k: built[c].get(k, "sublayer") for k in keys} for c in truth.runs}


def distributions(knobs: dict[int, dict]) -> dict:
    """The table's knobs as the Optuna distributions of a space that searched them."""
    values = {k: sorted({v[k] for v in knobs.values()}, key=str) for k in next(iter(knobs.values()))}
    out = {k: optuna.distributions.CategoricalDistribution(v) for k, v in values.items()}
    out["residual"] = optuna.distributions.CategoricalDistribution(["cascaded", "nag", "ancre"])
    out["n_layers"] = optuna.distributions.IntDistribution(min(values["n_layers"]), max(values["n_layers"]))
    return out


def truth_rows(truth: Truth, knobs: dict[int, dict], means: dict[int, float] | None = None) -> list[Observation]:
    """The truth as Observations: the seeds' mean (or `means`), sd the seed noise of that mean."""
    sd = (truth.noise or 0.0) / np.sqrt(2.0)
    losses = means or truth.loss
    return [Observation(knobs[c], losses[c], sd, truth.flops[c], float(truth.params[c])) for c in sorted(truth.runs)]


def effects_by_key(rows: Sequence[Observation], space: dict, draws: int = 400) -> dict[str, dict]:
    """The graded effects of `rows`, keyed 'knob: step', each {effect, low, high, reason}."""
    knobs, out = knobs_of(space), {}
    for at_equal in ("flops", "params"):
        fit = estimate_effects(rows, knobs, at_equal, draws=draws)
        for e in fit.effects:
            if (at_equal, e.knob) in GRADED:
                out[f"{e.knob}: {e.step}"] = {"effect": e.effect, "low": e.low, "high": e.high, "reason": e.reason,
                                              "at_equal": at_equal}  # fmt: skip
    return out


def truth_effects(truth: Truth, knobs: dict[int, dict], space: dict) -> dict[str, dict]:
    """The truth's effects, each with its seed-noise sd and whether it is resolvable (module docstring)."""
    out = effects_by_key(truth_rows(truth, knobs), space, draws=20)
    rng = np.random.default_rng(0)
    sd_mean = (truth.noise or 0.0) / np.sqrt(2.0)
    redrawn: dict[str, list[float]] = {k: [] for k in out}
    for _ in range(SEED_REDRAWS):
        means = {c: v + rng.normal(0.0, sd_mean) for c, v in truth.loss.items()}
        for k, e in effects_by_key(truth_rows(truth, knobs, means), space, draws=20).items():
            if e["effect"] is not None and k in redrawn:
                redrawn[k].append(e["effect"])
    for k, e in out.items():
        noise = float(np.std(redrawn[k], ddof=1)) if len(redrawn[k]) > 2 else None
        magnitude = abs(e["effect"]) if e["effect"] is not None else None
        e["seed_noise_sd"] = noise
        e["resolvable"] = bool(noise is not None and magnitude is not None and magnitude > 2.0 * noise)
    return out


def answer_rows(search: SearchReplay, truth: Truth, knobs: dict[int, dict]) -> list[Observation]:
    """The replayed search's answer as Observations: each config's predicted loss at T and its own sd (the error
    model's part that differs between configs: `Prediction.relative_sd`; else the seed noise carried to T)."""
    answer, out = search.answer(), []
    for number, p in answer.predictions.items():
        config = search.arrivals[number]
        if not np.isfinite(p.loss):
            continue
        sd = p.relative_sd if p.relative_sd is not None else answer.noise_at_target(number)
        out.append(Observation(knobs[config], p.loss, sd, truth.flops[config], float(truth.params[config])))
    return out


def grade(truth: dict[str, dict], answer: dict[str, dict]) -> dict:
    """Each effect once (module docstring): of the truth's resolvable effects, those the answer resolves and those
    it signs right; the share of truth effects inside the answer's 80% interval; and every effect the answer
    resolves, with its sign against the truth's (whether or not the truth resolves it)."""
    keys = [k for k in truth if truth[k]["effect"] is not None and answer.get(k, {}).get("effect") is not None]
    resolvable = [k for k in keys if truth[k]["resolvable"]]
    called = [k for k in keys if answer[k]["effect"] is not None and not answer[k]["reason"]]
    both = [k for k in resolvable if k in called]
    held = [answer[k]["low"] <= truth[k]["effect"] <= answer[k]["high"] for k in keys]
    agrees = {k: bool(np.sign(answer[k]["effect"]) == np.sign(truth[k]["effect"])) for k in keys}
    return {
        "effects": len(keys),
        "resolvable": len(resolvable),
        "answer_resolved": len(called),
        "both_resolve": len(both),
        "answer_resolves_share_of_the_truths": len(both) / len(resolvable) if resolvable else None,
        "signs_right": int(sum(agrees[k] for k in both)),
        "sign_agreement": float(np.mean([agrees[k] for k in both])) if both else None,
        "answer_resolved_signs_right": int(sum(agrees[k] for k in called)),
        "in_interval": int(sum(held)),
        "interval_coverage": float(np.mean(held)) if held else None,
        "per_effect": {
            k: {"truth_resolves": k in resolvable, "answer_resolves": k in called, "same_sign": agrees[k]} for k in keys
        },  # fmt: skip
    }


def corpus_grade(name: str) -> dict:
    """Every figure of one corpus (module docstring)."""
    corpus = CORPORA[name]
    rows, replica = graded_rows(read_table(corpus.runs), read_table(corpus.replica_runs))
    truth = Truth.of(rows)
    knobs = config_knobs(name, truth)
    space = distributions(knobs)
    truth_fx = truth_effects(truth, knobs, space)
    rungs, eta = LAYOUTS[DEFAULT_LAYOUT]
    budgets = layout_budgets(truth.target, rungs, eta)
    anchors = graded_rows(replica, read_table(corpus.anchor_runs))[1] if corpus.anchor_runs.exists() else []
    heads = corpus.keep_heads_runs
    level_rows = graded_rows(rows, read_table(heads))[1] if heads is not None and heads.exists() else []
    model = held_out_models().get(name, NO_MODEL)  # fitted on the other corpora, as make fidelity grades
    replays = []
    for arrival in arrival_orders(list(truth.runs)):
        search = SearchReplay(
            replica, budgets, eta, truth.target, anchor_rows=anchors, anchors=DEFAULT_ANCHORS if anchors else 0,
            model=model, level_rows=level_rows, level_configs=DEFAULT_LEVEL_CONFIGS,
        )  # fmt: skip
        try:
            search.run(arrival)
            answer_fx = effects_by_key(answer_rows(search, truth, knobs), space)
        finally:
            search.close()
        replays.append({"grade": grade(truth_fx, answer_fx), "effects": answer_fx})
    mean = _mean_over_orders([r["grade"] for r in replays])
    top = losses_at(replica, budgets[-1])  # the top replica rung of every config, seed 0: no search, no curve
    alone = effects_by_key(truth_rows(truth, knobs, top), space)
    return {
        "corpus": name,
        "configs": len(truth.runs),
        "target_flops": truth.target,
        "layout": DEFAULT_LAYOUT,
        "truth_seed_noise": truth.noise,
        "truth_effects": truth_fx,
        "table_order": replays[0],
        f"mean_over_{ORDERS}_orders": mean,
        "per_order": [r["grade"] for r in replays],
        "baseline_top_replica_rung_alone": grade(truth_fx, alone) | {"effects_by_key": alone},
    }


def _mean_over_orders(grades: Sequence[dict]) -> dict:
    """Each figure of several replays' grades averaged over the replays (a share over the replays that have it)."""
    keys = ("both_resolve", "answer_resolves_share_of_the_truths", "sign_agreement", "interval_coverage")
    out = {}
    for k in keys:
        values = [g[k] for g in grades if g[k] is not None]
        out[k] = float(np.mean(values)) if values else None
    return out | {"orders": len(grades)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--corpus", choices=sorted(CORPORA), action="append", help="default: every corpus")
    args = parser.parse_args()
    graded = {name: corpus_grade(name) for name in args.corpus or CORPORA}
    headline = {
        name: {
            **{
                k: c["table_order"]["grade"][k]
                for k in (
                    "resolvable",
                    "both_resolve",
                    "answer_resolves_share_of_the_truths",
                    "sign_agreement",
                    "interval_coverage",
                    "answer_resolved",
                    "answer_resolved_signs_right",
                )
            },
            "mean_over_orders": c[f"mean_over_{ORDERS}_orders"],
            "top_replica_rung_alone": {
                k: c["baseline_top_replica_rung_alone"][k]
                for k in ("both_resolve", "answer_resolves_share_of_the_truths", "sign_agreement", "interval_coverage")
            },
        }  # fmt: skip
        for name, c in graded.items()
    }
    summary = {"goals": GOALS, "band_level": BAND_LEVEL, "headline": headline}
    result = {"summary": summary, "corpora": graded, "machine": machine_info()}
    write_json(args.out, result)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
