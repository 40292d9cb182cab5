"""Fidelity: does the answer a search gives at the target budget match the configs trained for real there?

    python -m benchmarks.trust.fidelity build --corpus plays            # budget ladder and truth rows
    python -m benchmarks.trust.fidelity build-replicas --corpus plays   # the top replica rung, two seeds
    python -m benchmarks.trust.fidelity build-anchors --corpus plays    # every config's replica at T/3, one seed
    python -m benchmarks.trust.fidelity report                          # every corpus -> results/fidelity.json + .png

Three corpora (`CORPORA`: the shipped plays, Python source from `benchmarks.corpora.code_corpus`, and the
held-out handbook from `benchmarks.corpora.handbook_corpus`), each with its `configs`, every run as a search's
worker runs it (lr 3e-3, the default schedule): the truth (each config at T, two seeds), the top replica rung
(T/10, narrowed as a search narrows by default, two seeds), on the first two the budget ladder (4 rungs, T/80 ..
T/10, eta 2) and every config's anchor run at T/3, and the replica rungs at every share of KEEP_HEADS_SHARES as
a search narrowed them before it kept the head size (*_keep_heads tables: the layouts of LAYOUTS replayed there).
A build runs 2 processes of 1 torch thread and resumes with the jobs its table lacks; `--space FILE` trains under
that space's horizon rule. `report` replays a search on each table (`benchmarks.trust.grading`: through the
search's own rung gate and answer, the bias prior fitted on the other corpora, in ORDERS arrival orders) and grades
its answer against the truth, beside rankings without a search; a config whose rows are not all in the tables yet
is left out. `--smoke`: every path at tiny size.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from benchmarks.harness import machine_info, read_table, write_json
from benchmarks.trust import architecture
from benchmarks.trust.fidelity_plot import plot
from benchmarks.trust.fidelity_tables import (
    CORPORA,
    ETA,
    HERE,
    KEEP_HEADS_SHARES,
    REPLICA_TOP_SHARE,
    RUNGS,
    Corpus,
    architectures,
    build,
    horizon_rule,
    jobs,
    ready,
)
from benchmarks.trust.forecast_constants import OUT as CONSTANTS
from benchmarks.trust.forecast_constants import held_out_models
from benchmarks.trust.grading import ORDERS, Truth, baselines, graded_rows, losses_at, tau
from benchmarks.trust.replay_grading import graded_replay, over_orders
from nas.answer.decisions import Architecture
from nas.answer.error_model import NO_MODEL, ErrorModel
from nas.answer.extrapolate import RungPoint, budget_key, seed_noise
from nas.space.budget import Budget

# The ladders replayed on the replica tables, each as a search runs it (its anchors included), and the layout a
# search chooses by default (`Budget.ladder`: must be among them)
TOP_RUNG_ONLY = "every config once at the top rung"
LAYOUTS = {
    TOP_RUNG_ONLY: (1, 2.0),
    "3 rungs, eta 3": (3, 3.0),
    "2 rungs, eta 3": (2, 3.0),
    "2 rungs, eta 2": (2, 2.0),
}
_CHOSEN = Budget(trial_flops=1.0).ladder.layout
DEFAULT_LAYOUT = TOP_RUNG_ONLY if _CHOSEN.rungs == 1 else f"{_CHOSEN.rungs} rungs, eta {_CHOSEN.eta:g}"
DEFAULT_ANCHORS = Budget.model_fields["anchors"].default  # a search's: `nas search --anchors`
DEFAULT_LEVEL_CONFIGS = Budget.model_fields["level_configs"].default  # a search's: `nas search --level-configs`
# How the search ran before the head size was kept and the layout was chosen by cost: on the *_keep_heads tables
BEFORE_LAYOUT = (2, 2.0)
GOALS = {
    "kendall_tau": 0.8,
    "regret_in_seed_noise": 1.0,
    "true_best_in_predicted_top3": True,
    "hypervolume_ratio_nadir": 0.95,
    "compute_share": 0.15,
    "band_coverage": [0.7, 0.9],
    "level_error_mean": [-0.03, 0.03],
    "level_error_mae": 0.04,
    "resolved_call_accuracy": 0.95,
    "resolved_share_of_truth_resolvable": 0.4,
    "decision_accuracy": 0.9,
}


def layout_budgets(target: float, rungs: int, eta: float) -> list[float]:
    """The replica rungs of a ladder of `rungs` at ratio `eta` whose top rung is REPLICA_TOP_SHARE x T."""
    top = REPLICA_TOP_SHARE * target
    return [top / eta ** (rungs - 1 - r) for r in range(rungs)]


def corpus_report(corpus: Corpus, runs: Path, replica_runs: Path, model: ErrorModel = NO_MODEL) -> dict:
    """Every figure of one corpus: its truth, the replica ladder at each layout as a search runs it (its anchors and
    its level included, its answer reading `model`) beside its baselines, the search as it ran with the head count
    kept (2 rungs at eta 2), the budget ladder as a search runs it where the corpus has one, the figures apart from
    size, and what each share of T per trial buys (`compute_curve`)."""
    table = read_table(runs)
    rows, replica = graded_rows(table, read_table(replica_runs))
    # the anchors of the graded configs, where built: a partial anchor table leaves no config out of the grading
    anchors = graded_rows(replica, read_table(corpus.anchor_runs))[1] if corpus.anchor_runs.exists() else []
    heads = corpus.keep_heads_runs
    level_rows = graded_rows(rows, read_table(heads))[1] if heads is not None and heads.exists() else []
    truth = Truth.of(rows)
    archs = architectures(rows, corpus.name)
    built = {budget_key(r["budget_flops"]) for r in replica}
    search = {"anchor_rows": anchors, "anchors": DEFAULT_ANCHORS if anchors else 0, "model": model,
              "level_rows": level_rows, "level_configs": DEFAULT_LEVEL_CONFIGS, "archs": archs}  # fmt: skip
    layouts = {}
    for name, (rungs, eta) in LAYOUTS.items():
        budgets = layout_budgets(truth.target, rungs, eta)
        if {budget_key(b) for b in budgets} <= built:
            layouts[name] = over_orders(replica, truth, budgets, eta, **search) | {"rung_flops": budgets}
    default = layout_budgets(truth.target, *LAYOUTS[DEFAULT_LAYOUT])
    chosen = layouts[DEFAULT_LAYOUT]
    unbiased = {**search, "model": dataclasses.replace(model, bias=NO_MODEL.bias)}
    chosen["without_the_bias_correction"] = over_orders(replica, truth, default, LAYOUTS[DEFAULT_LAYOUT][1], **unbiased)
    tokens = {r["config"]: r["tokens"] for r in rows if r["kind"] == "truth"}
    answers = {
        architecture.ANSWER_VIEW: chosen["table_order"]["predicted"],
        **{f"{architecture.ANSWER_VIEW}, arrival order {i}": p for i, p in enumerate(chosen["per_order_predicted"])},
        "the same search without the bias correction (table order)": chosen["without_the_bias_correction"][
            "table_order"
        ]["predicted"],
    }
    ladder = [r for r in rows if r["kind"] == "ladder"]
    ladder_budgets = [min(r["budget_flops"] for r in ladder) * ETA**r for r in range(RUNGS)] if ladder else []
    out = {
        "corpus": corpus.name,
        "configs": len(truth.runs),
        "target_flops": truth.target,
        "truth": {
            "seed_noise": truth.noise,
            "spread_sd": float(np.std(list(truth.loss.values()), ddof=1)),
            "seeds_per_config": float(np.mean([len(v) for v in truth.runs.values()])),
            "kendall_tau_seed_vs_seed": tau(*({c: v[s] for c, v in truth.runs.items()} for s in (0, 1))),
            "tau_ceiling": truth.tau_ceiling(),
            "compute_flops": truth.compute,
        },
        "replica_ladder": {
            "default_layout": DEFAULT_LAYOUT,
            "default_anchors": search["anchors"],
            "error_model": {"measured_on": model.source, "description": model.describe()},
            "layouts": layouts,
            "baselines_at_default_layout": baselines(replica, truth, default),
            "rung_seed_noise": seed_noise(
                [RungPoint(r["config"], "-", r["budget_flops"], r["val_loss"], r["seed"]) for r in replica]
            ),
            "tokens_per_param_over_target": _spread(
                [r["tokens_per_param"] / r["target_tokens_per_param"] for r in replica]
            ),
            "off_path_rungs": sum(not r["on_path"] for r in replica),
            "replica_width_share": _spread([r["replica_d_model"] / r["d_model"] for r in replica]),
            "anchor_width_share": _spread([r["replica_d_model"] / r["d_model"] for r in anchors]) if anchors else None,
        },
        "architecture": architecture.fidelity_section(
            truth, archs, tokens, answers, replica, default, ladder, ladder_budgets
        ),  # fmt: skip
        "truth_per_config": truth.loss,
        "compute_curve": compute_curve(truth, level_rows, archs, model) if level_rows else None,
    }
    if corpus.keep_heads_runs is not None and corpus.keep_heads_runs.exists():
        out["layouts_with_the_head_count_kept"] = layouts_compared(table, read_table(corpus.keep_heads_runs), archs)
        out["before"] = out["layouts_with_the_head_count_kept"]["{} rungs, eta {:g}".format(*BEFORE_LAYOUT)] | {
            "narrowing": "head count kept, no narrower than 8",
            "layout": "{} rungs, eta {:g}".format(*BEFORE_LAYOUT),
        }
    if ladder:
        out["budget_ladder"] = {
            "as_a_search_runs_it": over_orders(ladder, truth, ladder_budgets, ETA, replica=False),
            "baselines": baselines(ladder, truth, ladder_budgets),
            "rung_flops": ladder_budgets,
        }
    return out


def layouts_compared(runs: Sequence[dict], keep_heads: Sequence[dict], archs: Mapping[int, Architecture]) -> dict:
    """Every layout of LAYOUTS replayed as a search runs it (without anchors) on a table that holds every share of
    KEEP_HEADS_SHARES (the replicas that kept the head count), each with its compute, its architecture figures
    and the top rung alone: does promotion pay for what it spends?"""
    rows, replica = graded_rows(runs, keep_heads)
    truth = Truth.of(rows)
    out = {}
    for name, (rungs, eta) in LAYOUTS.items():
        budgets = layout_budgets(truth.target, rungs, eta)
        replayed = over_orders(replica, truth, budgets, eta)
        out[name] = replayed | {
            "rung_flops": budgets,
            "architecture": architecture.architecture_grade(replayed["table_order"]["predicted"], truth, archs),
            "top_rung_alone": architecture.architecture_grade(losses_at(replica, budgets[-1]), truth, archs),
        }
    return out


def compute_curve(truth: Truth, keep_heads: Sequence[dict], archs: Mapping[int, Architecture], model) -> dict:
    """What each share of T per trial buys: the search replayed (table order) with every config once at that share
    on the keep-heads replicas, its answer reading the error model without its bias part (measured for the default
    narrowing at T/10 only), the level where the table has its budgets; decisions right on the pairs the truth
    resolves, resolved calls right, the median half-width of the 80% bands (in nats at T where there is a level)."""
    unbiased = dataclasses.replace(model, bias=NO_MODEL.bias)
    out = {}
    for share in KEEP_HEADS_SHARES:
        budgets = [share * truth.target]
        replayed = graded_replay(keep_heads, truth, budgets, 2.0, sorted(truth.runs), archs=archs, model=unbiased,
                                 level_rows=keep_heads, level_configs=DEFAULT_LEVEL_CONFIGS)  # fmt: skip
        graded = architecture.architecture_grade(replayed["predicted"], truth, archs)
        out[f"T/{1 / share:.0f}"] = {
            "share_of_target": share,
            "decision_accuracy": graded["decision_accuracy"],
            "resolvable": graded["resolvable"],
            "resolved_call_accuracy": replayed["resolved_call_accuracy"],
            "resolved_calls": replayed["resolved_calls"],
            "band_half_width": replayed["band_half_width"],
            "at_target": replayed["at_target"],
            "compute_share": replayed["compute_share"],
        }
    return out


def _spread(values: Sequence[float]) -> dict:
    return {"min": float(np.min(values)), "median": float(np.median(values)), "max": float(np.max(values))}


def headline(corpus: dict) -> dict:
    """The search's answer at the default layout as a search runs it (anchors included), beside the goals, the top
    rung alone and the search as it ran before."""
    layout = corpus["replica_ladder"]["layouts"][DEFAULT_LAYOUT]
    answer, mean = layout["table_order"], layout[f"mean_over_{ORDERS}_orders"]
    top = corpus["replica_ladder"]["baselines_at_default_layout"]
    top_alone = next(v for k, v in top.items() if k.startswith(f"rung {LAYOUTS[DEFAULT_LAYOUT][0] - 1} alone"))
    views = corpus["architecture"]["views"]
    out = {
        "kendall_tau": answer["kendall_tau"],
        "kendall_tau_mean_over_orders": mean["kendall_tau"],
        "kendall_tau_min_over_orders": mean["kendall_tau_min"],
        "regret_in_seed_noise": answer["regret_in_seed_noise"],
        "regret_in_seed_noise_mean_over_orders": mean["regret_in_seed_noise"],
        "true_best_in_predicted_top3": answer["true_best_in_predicted_top3"],
        "true_best_in_predicted_top3_share_of_orders": mean["true_best_in_predicted_top3"],
        "hypervolume_ratio_nadir": answer["hypervolume_ratio_nadir"],
        "compute_share": answer["compute_share"],
        "band_coverage": answer["band_coverage"],
        "band_coverage_mean_over_orders": mean["band_coverage"],
        "anchors": answer["anchors"],
        "discrepancy": answer["discrepancy"],
        "without_the_bias_correction_kendall_tau": layout["without_the_bias_correction"]["table_order"]["kendall_tau"],
        "error_model_measured_on": corpus["replica_ladder"]["error_model"]["measured_on"],
        "level_error_mean": answer.get("level_error_mean"),
        "level_error_mae": answer.get("level_error_mae"),
        "level_error_mean_over_orders": mean.get("level_error_mean"),
        "band_half_width": answer.get("band_half_width"),
        "band_coverage_about_the_level": answer.get("band_coverage_about_the_level"),
        "resolved_call_accuracy": answer.get("resolved_call_accuracy"),
        "resolved_calls": answer.get("resolved_calls"),
        "resolved_share_of_truth_resolvable": answer.get("resolved_share_of_truth_resolvable"),
        "resolved_call_accuracy_mean_over_orders": mean.get("resolved_call_accuracy"),
        "level_configs": answer.get("level_configs"),
        "top_rung_alone_kendall_tau": top_alone["kendall_tau"],
        "top_rung_alone_architecture_tau": views["top replica rung alone, seed 0"]["architecture_tau"],
        "top_rung_alone_decision_accuracy": views["top replica rung alone, seed 0"]["decision_accuracy"],
        "top_rung_alone_compute_share": REPLICA_TOP_SHARE,  # every config once at T/10
        "tau_ceiling": corpus["truth"]["tau_ceiling"],
        **architecture.headline(corpus["architecture"]),
    }
    if "before" in corpus:
        before = corpus["before"]
        out["before"] = {
            "kendall_tau": before["table_order"]["kendall_tau"],
            "architecture_tau": before["architecture"]["architecture_tau"],
            "decision_accuracy": before["architecture"]["decision_accuracy"],
            "compute_share": before["table_order"]["compute_share"],
            "top_rung_alone_kendall_tau": before["top_rung_alone"]["kendall_tau"],
        }
    return out


def report(
    corpora: Sequence[tuple[Corpus, Path, Path]],
    out: Path,
    models: Mapping[str, ErrorModel],
    dashboard_summary: Path | None = None,
    curve_out: Path | None = None,
) -> dict:
    """Grade every corpus, each with its held-out error model (`models`: by corpus, fitted on the others,
    `benchmarks.trust.forecast_constants`); write `out` (JSON and PNG), and, if given, `dashboard_summary` (the
    headline figures, which the dashboard ships as package data) and `curve_out` (the compute curve a search quotes,
    package data of `nas.answer.compute_curve`)."""
    graded = {c.name: corpus_report(c, runs, replica, models.get(c.name, NO_MODEL)) for c, runs, replica in corpora}
    curves = {name: c["compute_curve"] for name, c in graded.items() if c.get("compute_curve")}
    summary = {
        "default_layout": DEFAULT_LAYOUT,
        "goals": GOALS,
        "headline": {name: headline(c) for name, c in graded.items()},
        "compute_curve": curves,
    }
    result = {"summary": summary, "corpora": graded, "machine": machine_info()}
    write_json(out, result)
    plot(result, out.with_suffix(".png"), DEFAULT_LAYOUT, GOALS)
    if dashboard_summary is not None:
        dashboard_summary.write_text(json.dumps({"summary": summary, "machine": result["machine"]}, indent=2) + "\n")
    if curve_out is not None:
        curve_out.write_text(json.dumps(curves, indent=2) + "\n")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("build", "build-replicas", "build-keep-heads", "build-anchors", "report"))
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="plays", help="build: the corpus and its tables")
    parser.add_argument("--runs", type=Path, help="build: the budget ladder and truth table (default: the corpus's)")
    parser.add_argument("--replica-runs", type=Path, help="build: the replica table (default: the corpus's)")
    parser.add_argument("--anchor-runs", type=Path, help="build: the anchor table (default: the corpus's)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "fidelity.json", help="report: the JSON")
    parser.add_argument("--smoke", action="store_true", help="tiny budgets and 3 configs: every path, no meaning")
    parser.add_argument("--space", type=Path, help="build: train under this space file's horizon rule (if any)")
    parser.add_argument("--seeds", default="0,1", help="build: the seeds to train, comma-separated")
    parser.add_argument("--processes", type=int, default=2, help="build: jobs run in parallel")
    parser.add_argument("--kinds", default="ladder,truth", help="build: the kinds of run, ladder and/or truth")
    parser.add_argument("--dashboard-summary", type=Path, help="report: also write the summary here (package data)")
    parser.add_argument(
        "--constants", type=Path, default=CONSTANTS, help="report: the held-out error models (forecast_constants)"
    )
    parser.add_argument("--compute-curve", type=Path, help="report: also write the compute curve here (package data)")
    args = parser.parse_args()
    corpus = CORPORA[args.corpus]
    if args.runs or args.replica_runs or args.anchor_runs:  # tables given by hand: no earlier tables beside them
        corpus = dataclasses.replace(
            corpus,
            runs=args.runs or corpus.runs,
            replica_runs=args.replica_runs or corpus.replica_runs,
            anchor_runs=args.anchor_runs or corpus.anchor_runs,
            keep_heads_runs=None,
        )
    runs, replica_runs = corpus.runs, corpus.replica_runs
    seeds = tuple(int(s) for s in args.seeds.split(","))
    if args.command == "build":
        kinds = tuple(args.kinds.split(","))
        build(runs, jobs(args.smoke, horizon_rule(args.space), kinds, seeds, corpus=corpus.name), args.processes)
    elif args.command == "build-keep-heads":  # every share of KEEP_HEADS_SHARES, the head count kept
        todo = jobs(args.smoke, horizon_rule(args.space), ("replica",), seeds, corpus.name, keep_heads=True)
        build(corpus.keep_heads_runs or HERE / "data" / f"{corpus.name}_keep_heads.csv", todo, args.processes)
    elif args.command in ("build-replicas", "build-anchors"):
        kind = args.command.removeprefix("build-").removesuffix("s")
        chosen = seeds if kind == "replica" else seeds[:1]  # an anchor is one run
        todo = jobs(args.smoke, horizon_rule(args.space), (kind,), chosen, corpus.name)
        build(replica_runs if kind == "replica" else corpus.anchor_runs, todo, args.processes)
    else:
        tables = [(c, c.runs, c.replica_runs) for c in CORPORA.values() if ready(c)]
        if args.runs or args.replica_runs or args.anchor_runs:  # one corpus's tables given by hand
            tables = [(corpus, runs, replica_runs)]
        result = report(tables, args.out, held_out_models(args.constants), args.dashboard_summary, args.compute_curve)
        print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
