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
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.harness import FAMILIES, append_runs, machine_info, pending, read_table, write_json
from benchmarks.trust import architecture
from benchmarks.trust.fidelity_plot import plot
from benchmarks.trust.grading import ORDERS, Truth, baselines, graded_rows, losses_at, over_orders, tau
from nas.answer.decisions import Architecture
from nas.answer.discrepancy import NO_PRIOR, BiasPrior
from nas.answer.extrapolate import RungPoint, budget_key, seed_noise
from nas.space.budget import Budget

HERE = Path(__file__).resolve().parents[1]  # benchmarks/: its data/ and results/
ROOT = HERE.parent
RUNS_CSV = HERE / "data" / "fidelity_runs.csv"
WIDTHS, DEPTHS, MOD_RATES = (32, 64, 96), (2, 4, 6), (0.0, 0.25, 0.5)
FIXED = dict(vocab_size=256, seq_len=64, n_heads=2, mod_every=2)
# 4 rungs at ratio 2 (C0 .. 8 C0, the span of 3 rungs at ratio 3): the held-out check (fit the lower rungs,
# predict the top one) then sees 3 points per config, enough to test a per-config exponent
LOWEST_RUNG, RUNGS, ETA, TRUTH_RATIO = 2.25e10, 4, 2.0, 10.0
# 256 held-out sequences (16k tokens spread over the held-out text; a search's default is 64): the
# evaluation's sampling noise on a gap between two runs falls to 0.004 nats (0.008 at 64 sequences)
RUN = dict(batch_size=8, eval_sequences=256, evals=1, report_every=1000)
COLUMNS = ["config", "residual", "n_layers", "d_model", "mod_rate", "params", "executed_flops_per_token", "kind",
           "seed", "rung", "budget_flops", "tokens", "val_loss", "compute_flops", "wall_time_s", "status"]  # fmt: skip
# Replica rungs (`workers.trial.replica`), narrowed as a search narrows by default, are built at T/10: the layout a
# search chooses by default trains every config there once (`workers.ladder.layout`). The tables that narrowed at a
# fixed head count (*_keep_heads) hold every share of KEEP_HEADS_SHARES, each its own run, so that the report can
# replay there any ladder whose rungs are among them: 3 rungs at eta 3 (T/90, T/30, T/10), 2 at eta 2 or 3.
REPLICA_TOP_SHARE = 0.1
REPLICA_SHARES = (REPLICA_TOP_SHARE,)
KEEP_HEADS_SHARES = (1 / 90, 1 / 40, 1 / 30, 1 / 20, 1 / 10)
# Anchors (`nas.answer.discrepancy`): every config also trained once (seed 0) as the replica a search trains at
# ANCHOR_SHARE x T, wider and nearer the target's shape than the top rung, so that a replay can pick any of them
ANCHOR_SHARE = 1 / 3
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
# How the search ran before the head size was kept and the layout was chosen by cost: on the *_keep_heads tables
BEFORE_LAYOUT = (2, 2.0)
GOALS = {
    "kendall_tau": 0.8,
    "regret_in_seed_noise": 1.0,
    "true_best_in_predicted_top3": True,
    "hypervolume_ratio_nadir": 0.95,
    "compute_share": 0.2,
    "band_coverage": [0.7, 0.9],
}
REPLICA_COLUMNS = [*COLUMNS, "replica_d_model", "replica_params", "tokens_per_param", "target_tokens_per_param",
                   "on_path"]  # fmt: skip
REPLICA_CSV = HERE / "data" / "fidelity_replica_runs.csv"


@dataclass(frozen=True)
class Corpus:
    """One corpus of the benchmark: where its text is, and its two tables."""

    name: str
    source: str  # DataConfig.source: "shipped", or a file of this repository
    runs: Path  # budget ladder and truth rows
    replica_runs: Path  # replica rungs, narrowed as a search does by default
    anchor_runs: Path  # the replica at ANCHOR_SHARE x T of every config
    keep_heads_runs: Path | None = None  # replica rungs narrowed at a fixed head count (the earlier default)

    def data(self):
        from workers.data.config import DataConfig

        return DataConfig(source=self.source if self.source == "shipped" else str(ROOT / self.source))


CORPORA = {
    "plays": Corpus(
        "plays",
        "shipped",
        RUNS_CSV,
        REPLICA_CSV,
        HERE / "data" / "fidelity_anchor_runs.csv",
        HERE / "data" / "fidelity_replica_runs_keep_heads.csv",
    ),
    "code": Corpus(
        "code",
        "benchmarks/data/python_stdlib.jsonl.gz",  # benchmarks/corpora/code_corpus.py
        HERE / "data" / "fidelity_code_runs.csv",
        HERE / "data" / "fidelity_code_replica_runs.csv",
        HERE / "data" / "fidelity_code_anchor_runs.csv",
        HERE / "data" / "fidelity_code_replica_runs_keep_heads.csv",
    ),
    "handbook": Corpus(  # held out: chosen after every method and constant (benchmarks/corpora/handbook_corpus.py)
        "handbook",
        "benchmarks/data/debian_handbook.jsonl.gz",
        HERE / "data" / "fidelity_handbook_runs.csv",
        HERE / "data" / "fidelity_handbook_replica_runs.csv",
        HERE / "data" / "fidelity_handbook_anchor_runs.csv",
        HERE / "data" / "fidelity_handbook_replica_runs_keep_heads.csv",
    ),
}


@dataclass(frozen=True)
class Job:
    config: int
    arch: dict
    kind: str  # "ladder", "truth", "replica" or "anchor"
    seed: int
    budget: float  # the top rung's, or the truth's (a replica job's target)
    rule: dict = field(default_factory=dict)  # OptimConfig's horizon-rule fields (`horizon_rule`)
    corpus: str = "plays"
    keep_heads: bool = False  # a replica job of the *_keep_heads tables: every share of KEEP_HEADS_SHARES

    @property
    def cost(self) -> float:
        replica = sum(REPLICA_SHARES) * 1.75
        share = {"ladder": 1.1, "truth": 1.0, "replica": replica, "anchor": ANCHOR_SHARE}[self.kind]
        return self.budget * share


# Matched-cost contrasts, appended to every corpus's grid: each shape in every family (family at equal shape), and
# shapes paired at near-equal parameters or executed FLOPs per token (within 15%): 8x32 / 2x64 / 4x48 and 4x64 with
# blocks routed at 0.875 on every other block (238k-271k FLOPs per token; 8x32 and 2x64 at 123k / 127k parameters);
# 12x32 / 3x64 / 8x48 with blocks routed at 0.5 (340k-388k; 12x32 and 3x64 at 177k / 175k parameters). At T they
# see 6-20 tokens per parameter. (n_layers, d_model, mod_rate, mod_granularity)
CONTRAST_SHAPES = (
    (8, 32, 0.0, "sublayer"),
    (2, 64, 0.0, "sublayer"),
    (4, 48, 0.0, "sublayer"),
    (4, 64, 0.875, "block"),
    (12, 32, 0.0, "sublayer"),
    (3, 64, 0.0, "sublayer"),
    (8, 48, 0.5, "block"),
)


def configs(smoke: bool, corpus: str = "plays") -> list[dict]:
    """The configs of a corpus. Plays: every family x width x depth but the largest (96 x 6), the MoD rate in a
    Latin square over width and depth, so it is confounded with neither (24 configs). Code: every family at
    five (width, depth, MoD rate) points that cover the same grid (15 configs). Both then add every family at each
    of `CONTRAST_SHAPES` (21 configs). Smoke: 3 tiny ones."""
    if corpus in ("code", "handbook"):
        shapes = [(32, 2, 0.25), (32, 6, 0.0), (64, 4, 0.5), (64, 6, 0.25), (96, 2, 0.0)]
        grid = [(f, w, d, m) for f in FAMILIES for w, d, m in shapes]
    else:
        grid = [
            (f, w, d, MOD_RATES[(WIDTHS.index(w) + DEPTHS.index(d)) % 3])
            for f, w, d in itertools.product(FAMILIES, WIDTHS, DEPTHS)
            if (w, d) != (96, 6)
        ]
    chosen = [dict(residual=f, d_model=w, n_layers=d, mod_rate=m, **FIXED) for f, w, d, m in grid]
    chosen += [
        dict(residual=f, d_model=w, n_layers=d, mod_rate=m, **FIXED, mod_granularity=g)
        for d, w, m, g in CONTRAST_SHAPES
        for f in FAMILIES
    ]
    if smoke:
        return [dict(c, d_model=32, n_layers=2) for c in chosen[:3]]
    return chosen


def jobs(
    smoke: bool,
    rule: dict | None = None,
    kinds: tuple[str, ...] = ("ladder", "truth"),
    seeds: tuple[int, ...] = (0, 1),
    corpus: str = "plays",
) -> list[Job]:
    low = 2e8 if smoke else LOWEST_RUNG
    top = low * ETA ** (RUNGS - 1)
    rule = rule or {}
    out = []
    for i, arch in enumerate(configs(smoke, corpus)):
        if "ladder" in kinds:
            out += [Job(i, arch, "ladder", seed, top, rule, corpus=corpus) for seed in seeds]
        if "truth" in kinds:
            out += [Job(i, arch, "truth", seed, TRUTH_RATIO * top, rule, corpus=corpus) for seed in seeds]
        for kind in {"replica", "anchor"} & set(kinds):
            out += [Job(i, arch, kind, seed, TRUTH_RATIO * top, rule, corpus) for seed in seeds]
    return sorted(out, key=lambda j: -j.cost)  # longest first: the two processes finish together


def replica_rung_flops(target: float, shares: Sequence[float] = REPLICA_SHARES) -> list[float]:
    """The replica rungs' budgets for target T: T x each share, lowest first."""
    return [target * share for share in sorted(shares)]


def run_job(job: Job) -> list[dict]:
    """One ladder or truth run in this process; its rows for the CSV."""
    import torch

    from search_spaces.residual_lm import ArchConfig
    from workers.data.corpus import load_corpus
    from workers.ladder.plans import RungSpacing
    from workers.training.config import OptimConfig, RunConfig
    from workers.trial.run import run_trial

    torch.set_num_threads(1)
    cfg = ArchConfig(**job.arch)
    if job.kind in ("replica", "anchor"):
        return run_replica_job(job, cfg)
    ladder = RungSpacing(rungs=RUNGS if job.kind == "ladder" else 1, eta=ETA)
    result = run_trial(
        cfg,
        job.budget,
        load_corpus(CORPORA[job.corpus].data()),
        seed=job.seed,
        optim=OptimConfig(lr=3e-3, **job.rule),
        run=RunConfig(**RUN),
        width_probe=False,
        spacing=ladder,
    )
    base = job_fields(job, cfg, str(result.status)) | dict(
        wall_time_s=result.wall_time_s, compute_flops=result.training_flops + result.branch_flops
    )
    rungs = [asdict(r) for r in result.rungs] or [
        dict(rung=0, budget_flops=job.budget, tokens=result.tokens_seen, val_loss=result.val_loss)
    ]
    return [{**base, **{k: r[k] for k in ("rung", "budget_flops", "tokens", "val_loss")}} for r in rungs]


def job_fields(job: Job, cfg, status: str) -> dict:
    """The columns every row of a job shares: the config, its size and cost, the job's kind and seed."""
    from search_spaces.residual_lm import flops_per_token, parameter_count

    return dict(
        config=job.config,
        residual=cfg.residual,
        n_layers=cfg.n_layers,
        d_model=cfg.d_model,
        mod_rate=cfg.mod_rate,
        params=parameter_count(cfg),
        executed_flops_per_token=flops_per_token(cfg).executed,
        kind=job.kind,
        seed=job.seed,
        status=status,
    )


def run_replica_job(job: Job, cfg) -> list[dict]:
    """Every replica rung of one config and seed, as a search's worker trains them (`run_replica_trial`), narrowed
    as a search does by default; an anchor job: the one replica at ANCHOR_SHARE x T."""
    from workers.data.corpus import load_corpus
    from workers.ladder.narrowing import KEEP_HEADS, Narrowing
    from workers.training.config import OptimConfig, RunConfig
    from workers.trial.contract import TrialRequest
    from workers.trial.replica import run_replica_trial

    shares = KEEP_HEADS_SHARES if job.keep_heads else REPLICA_SHARES
    flops = replica_rung_flops(job.budget, shares) if job.kind == "replica" else [ANCHOR_SHARE * job.budget]
    narrowing = KEEP_HEADS if job.keep_heads else Narrowing()  # else as a search narrows by default
    measurement = replica_measurement(job.budget, flops, narrowing)
    optim, run = OptimConfig(lr=3e-3, **job.rule), RunConfig(**RUN)
    request = TrialRequest.of(cfg, measurement, optim=optim, run=run, seed=job.seed, width_probe=False)
    result = run_replica_trial(request, load_corpus(CORPORA[job.corpus].data()))
    return replica_rows(job_fields(job, cfg, str(result.status)), result.rungs)


def replica_measurement(target: float, rung_flops, narrowing):
    """Replica rungs of `rung_flops` (lowest first) on the path to `target`, narrowed as `narrowing` says."""
    from workers.ladder.trial_plan import LadderPlan

    return LadderPlan(rung_flops[-1], None, tuple(rung_flops), target, narrowing)


def replica_rows(base: dict, records: Sequence) -> list[dict]:
    """A replica trial's rung records (`RungRecord`) as table rows, each with the job's shared columns `base`."""
    rungs = [asdict(r) for r in records]
    return [
        {
            **base,
            **{k: r[k] for k in ("rung", "budget_flops", "tokens", "val_loss", "tokens_per_param", "on_path")},
            "compute_flops": r["training_flops"],
            "wall_time_s": r["train_seconds"],
            "replica_d_model": r["d_model"],
            "replica_params": r["params"],
            "target_tokens_per_param": r["target_tokens_per_param"],
        }
        for r in rungs
    ]


def horizon_rule(space: Path | None) -> dict:
    """The horizon rule (`OptimConfig.horizon_tokens`, `horizon_exponents`, `horizon_span`) of a space file
    (`--space`), as that space's trials run; none for the default space. 3e-3 is NAG's best rate at the
    completep space's 752,640 tokens (`make transfer`)."""
    if space is None:
        return {}
    from nas.space.loading import load_space

    fixed = load_space(space).fixed
    return {k: fixed[k] for k in ("horizon_tokens", "horizon_exponents", "horizon_span") if k in fixed}


def pending_jobs(out: Path, todo: list[Job]) -> list[Job]:
    """The jobs of `todo` whose rows the table at `out` does not hold yet (all of them without a table)."""
    rows = read_table(out) if out.exists() else []
    return pending(todo, rows, lambda j: (j.config, j.kind, j.seed), lambda r: (r["config"], r["kind"], r["seed"]))


def build(out: Path, all_jobs: list[Job], processes: int = 2) -> None:
    """Run the jobs `out` lacks, appending their rows (a killed build resumes where it stopped)."""
    columns = REPLICA_COLUMNS if any(j.kind in ("replica", "anchor") for j in all_jobs) else COLUMNS
    append_runs(out, pending_jobs(out, all_jobs), run_job, columns=columns, processes=processes)


def layout_budgets(target: float, rungs: int, eta: float) -> list[float]:
    """The replica rungs of a ladder of `rungs` at ratio `eta` whose top rung is REPLICA_TOP_SHARE x T."""
    top = REPLICA_TOP_SHARE * target
    return [top / eta ** (rungs - 1 - r) for r in range(rungs)]


def corpus_report(corpus: Corpus, runs: Path, replica_runs: Path, prior: BiasPrior = NO_PRIOR) -> dict:
    """Every figure of one corpus: its truth, the replica ladder at each layout as a search runs it (its anchors
    included) beside its baselines, the search as it ran before (the head count kept, 2 rungs at eta 2, no
    anchors), the budget ladder as a search runs it where the corpus has one, and the figures apart from size."""
    table = read_table(runs)
    rows, replica = graded_rows(table, read_table(replica_runs))
    # the anchors of the graded configs, where built: a partial anchor table leaves no config out of the grading
    anchors = graded_rows(replica, read_table(corpus.anchor_runs))[1] if corpus.anchor_runs.exists() else []
    truth = Truth.of(rows)
    built = {budget_key(r["budget_flops"]) for r in replica}
    search = {"anchor_rows": anchors, "anchors": DEFAULT_ANCHORS if anchors else 0, "prior": prior}
    layouts = {}
    for name, (rungs, eta) in LAYOUTS.items():
        budgets = layout_budgets(truth.target, rungs, eta)
        if {budget_key(b) for b in budgets} <= built:
            layouts[name] = over_orders(replica, truth, budgets, eta, **search) | {"rung_flops": budgets}
    default = layout_budgets(truth.target, *LAYOUTS[DEFAULT_LAYOUT])
    layouts[DEFAULT_LAYOUT]["without_the_bias_correction"] = over_orders(
        replica, truth, default, LAYOUTS[DEFAULT_LAYOUT][1]
    )
    archs = architectures(rows, corpus.name)
    tokens = {r["config"]: r["tokens"] for r in rows if r["kind"] == "truth"}
    chosen = layouts[DEFAULT_LAYOUT]
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
            "bias_prior": {
                "beta": prior.beta,
                "beta_sd": prior.beta_sd,
                "family": dict(prior.family),
                "measured_on": prior.source,
            },  # fmt: skip
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


def architectures(rows: Sequence[dict], corpus: str) -> dict[int, Architecture]:
    """Each config's architecture: its entry in `configs` where the row is that config (MoD's routing with it),
    else the row's own fields (a smoke table's configs)."""
    known, keys = configs(False, corpus), ("residual", "n_layers", "d_model", "mod_rate")
    return {
        r["config"]: Architecture.of(
            known[r["config"]] if r["config"] < len(known) and all(known[r["config"]][k] == r[k] for k in keys) else r
        )  # fmt: skip
        for r in rows
    }


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
        "bias_prior_measured_on": corpus["replica_ladder"]["bias_prior"]["measured_on"],
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


def ready(corpus: Corpus) -> bool:
    """Whether a corpus's truth and replica tables hold at least one config in full (a table being built may not)."""
    if not (corpus.runs.exists() and corpus.replica_runs.exists()):
        return False
    rows, _ = graded_rows(read_table(corpus.runs), read_table(corpus.replica_runs))
    return any(r["kind"] == "truth" for r in rows)


def held_out_priors(names: Sequence[str]) -> dict[str, BiasPrior]:
    """The bias prior each corpus is graded with: fitted on the other corpora (`benchmarks.trust.anchors.fit_prior`),
    never on its own truth; the held-out corpus's is the one a search ships with (fitted on the method corpora)."""
    from benchmarks.trust.anchors import Corpus as BiasCorpus
    from benchmarks.trust.anchors import fit_prior

    loaded = {}
    for name in names:
        try:
            loaded[name] = BiasCorpus(name)
        except (OSError, IndexError, KeyError):  # tables not built yet
            continue
    return {name: fit_prior([c for n, c in loaded.items() if n != name]) for name in loaded if len(loaded) > 1}


def report(corpora: Sequence[tuple[Corpus, Path, Path]], out: Path, dashboard_summary: Path | None = None) -> dict:
    """Grade every corpus; write `out` (JSON and PNG) and, if given, `dashboard_summary` (the headline figures,
    which the dashboard ships as package data)."""
    priors = held_out_priors([c.name for c, _, _ in corpora])
    graded = {c.name: corpus_report(c, runs, replica, priors.get(c.name, NO_PRIOR)) for c, runs, replica in corpora}
    summary = {
        "default_layout": DEFAULT_LAYOUT,
        "goals": GOALS,
        "headline": {name: headline(c) for name, c in graded.items()},
    }
    result = {"summary": summary, "corpora": graded, "machine": machine_info()}
    write_json(out, result)
    plot(result, out.with_suffix(".png"), DEFAULT_LAYOUT, GOALS)
    if dashboard_summary is not None:
        dashboard_summary.write_text(json.dumps({"summary": summary, "machine": result["machine"]}, indent=2) + "\n")
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
        todo = [
            dataclasses.replace(j, keep_heads=True)
            for j in jobs(args.smoke, horizon_rule(args.space), ("replica",), seeds, corpus.name)
        ]
        build(
            corpus.keep_heads_runs or HERE / "data" / f"fidelity_{corpus.name}_replica_runs_keep_heads.csv",
            todo,
            args.processes,
        )
    elif args.command in ("build-replicas", "build-anchors"):
        kind = args.command.removeprefix("build-").removesuffix("s")
        chosen = seeds if kind == "replica" else seeds[:1]  # an anchor is one run
        todo = jobs(args.smoke, horizon_rule(args.space), (kind,), chosen, corpus.name)
        build(replica_runs if kind == "replica" else corpus.anchor_runs, todo, args.processes)
    else:
        tables = [(c, c.runs, c.replica_runs) for c in CORPORA.values() if ready(c)]
        if args.runs or args.replica_runs or args.anchor_runs:  # one corpus's tables given by hand
            tables = [(corpus, runs, replica_runs)]
        result = report(tables, args.out, args.dashboard_summary)
        print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
