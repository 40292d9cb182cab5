"""Fidelity: does the ranking the search predicts at the target budget match the ranking trained for real there?

    python -m benchmarks.fidelity build    # real runs -> benchmarks/data/fidelity_runs.csv (45 min here)
    python -m benchmarks.fidelity report --out benchmarks/results/fidelity.json   # JSON + PNG from the table

`build` measures a fixed set of 24 configs (every family x widths 32/64/96 x depths 2/4/6, less the
three largest; MoD rate 0, 0.25 or 0.5 in a Latin square over width and depth) with
`workers.trial.run_trial` exactly as a search's worker does: a 4-rung ladder (C0, 2 C0, 4 C0, 8 C0,
C0 = 2.25e10 FLOPs, warmup-stable-decay, cooldown branches; `nas search --rungs 4 --eta 2`), twice
(seeds 0 and 1), at lr 3e-3. The truth is the mean of two runs (seeds 0 and 1) at T = 10 x the top rung: one
run's seed noise is as large as many gaps between configs at T, and the mean halves its variance.
Jobs run in 2 processes of 1 torch thread each (the machine's 2 cores); a killed build resumes,
running only the jobs the table lacks.

`report` fits the search's model (`nas.extrapolate`: L = E + A C^-alpha, E shared by the study and alpha
by a family) over the rung points a search would hold (seed 0 of every config, the second seed of the
configs on the front predicted from seed 0: `nas search --repeat-seeds 1`) and predicts each config's
loss at T, as `nas.fidelity` does in a search; the ladder's compute share counts those runs. It replays
the search's promotion (`nas.promotion`, eta 2, configs arriving in table order) to say how much of the
ladder a search would have run, and compares rankings with the truth: Kendall tau-b for the prediction
and three baselines (lowest rung, top rung, parameter count with bigger better), also against the seed-0
run alone, the truth's seed-vs-seed tau and the noise ceiling (the tau a perfect predictor would reach
against this noisy truth), whether the true best is in the predicted top 3, the hypervolume of the
predicted front scored on true losses over the true front's, the ladder's compute over the truth's, and
how many truth pairs cross between the lowest rung and the truth (a benchmark without crossings could
not tell a method from the lowest rung).
`--smoke` runs every path at tiny size (CI).

    python -m benchmarks.fidelity build --space search_spaces/residual_lm/space_completep.yaml \
        --runs benchmarks/data/fidelity_runs_horizon_rule.csv      # then `report --runs` that table

trains under a space's horizon rule (`OptimConfig.horizon_tokens`: NAG's rate times (D / 752,640)^-0.74
for a run of D tokens, the top rung's on a ladder, D clamped to 51,200-752,640, so every truth run keeps
3e-3; cascaded and ANCRe at 3e-3, beta 0). The shipped table of that name was built so (its cascaded and
ANCRe rows are the main table's: beta 0 leaves a run bit for bit as it was).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.stats import kendalltau

from benchmarks.harness import append_runs, machine_info, pending, write_json
from nas.extrapolate import RungPoint, fit_study, seed_noise
from nas.pareto import FrontPoint, hypervolume, pareto_rows
from nas.promotion import Candidate, should_promote

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RUNS_CSV = HERE / "data" / "fidelity_runs.csv"
FAMILIES = ("cascaded", "nag", "ancre")
WIDTHS, DEPTHS, MOD_RATES = (32, 64, 96), (2, 4, 6), (0.0, 0.25, 0.5)
FIXED = dict(vocab_size=256, seq_len=64, n_heads=2, mod_every=2)
# 4 rungs at ratio 2 (C0 .. 8 C0, the span of 3 rungs at ratio 3): the held-out check (fit the lower rungs,
# predict the top one) then sees 3 points per config, enough to test a per-config exponent
LOWEST_RUNG, RUNGS, ETA, TRUTH_RATIO = 2.25e10, 4, 2.0, 10.0
# 256 held-out sequences (16k tokens spread over the held-out text; a search's default is 64): the
# evaluation's sampling noise on a gap between two runs falls to 0.004 nats (0.008 at 64 sequences)
RUN = dict(batch_size=8, eval_sequences=256, evals=1, report_every=1000)
COLUMNS = [
    "config",
    "residual",
    "n_layers",
    "d_model",
    "mod_rate",
    "params",
    "executed_flops_per_token",
    "kind",
    "seed",
    "rung",
    "budget_flops",
    "tokens",
    "val_loss",
    "compute_flops",
    "wall_time_s",
    "status",
]
# Replica rungs (`workers.replica`): rung r trains the config's replica for T / (REPLICA_ETA^(k-1-r) x
# REPLICA_TOP_SHARE^-1), the top one a tenth of T (the budget ladder's top rung), eta 2 below it
REPLICA_RUNGS, REPLICA_ETA, REPLICA_TOP_SHARE = 3, 2.0, 0.1
REPLICA_COLUMNS = [
    *COLUMNS,
    "replica_d_model",
    "replica_params",
    "tokens_per_param",
    "target_tokens_per_param",
    "on_path",
]
REPLICA_CSV = HERE / "data" / "fidelity_replica_runs.csv"


@dataclass(frozen=True)
class Job:
    config: int
    arch: dict
    kind: str  # "ladder", "truth" or "replica"
    seed: int
    budget: float  # the top rung's, or the truth's (a replica job's target)
    rule: dict = field(default_factory=dict)  # OptimConfig's horizon-rule fields (`horizon_rule`)
    min_width: int = 8  # replica jobs: the narrowest replica width (`workers.replica.DEFAULT_MIN_WIDTH`)

    @property
    def cost(self) -> float:
        share = {"ladder": 1.1, "truth": 1.0, "replica": REPLICA_TOP_SHARE * 1.75}[self.kind]
        return self.budget * share


def configs(smoke: bool) -> list[dict]:
    """Every family x width x depth but the largest (96 x 6), the MoD rate in a Latin square over width and
    depth, so it is confounded with neither (24 configs; 3 in smoke)."""
    grid = [(f, w, d) for f, w, d in itertools.product(FAMILIES, WIDTHS, DEPTHS) if (w, d) != (96, 6)]
    chosen = [
        dict(residual=f, d_model=w, n_layers=d, mod_rate=MOD_RATES[(WIDTHS.index(w) + DEPTHS.index(d)) % 3], **FIXED)
        for f, w, d in grid
    ]
    if smoke:
        return [dict(c, d_model=32, n_layers=2) for c in chosen[:3]]
    return chosen


def jobs(
    smoke: bool,
    rule: dict | None = None,
    kinds: tuple[str, ...] = ("ladder", "truth"),
    seeds: tuple[int, ...] = (0, 1),
    min_width: int = 8,
) -> list[Job]:
    low = 2e8 if smoke else LOWEST_RUNG
    top = low * ETA ** (RUNGS - 1)
    rule = rule or {}
    out = []
    for i, arch in enumerate(configs(smoke)):
        if "ladder" in kinds:
            out += [Job(i, arch, "ladder", seed, top, rule) for seed in seeds]
        if "truth" in kinds:
            out += [Job(i, arch, "truth", seed, TRUTH_RATIO * top, rule) for seed in seeds]
        if "replica" in kinds:
            out += [Job(i, arch, "replica", seed, TRUTH_RATIO * top, rule, min_width) for seed in seeds]
    return sorted(out, key=lambda j: -j.cost)  # longest first: the two processes finish together


def replica_rung_flops(target: float) -> list[float]:
    """The replica ladder's rung budgets for target T: T x REPLICA_TOP_SHARE / eta^(k-1-r)."""
    top = REPLICA_TOP_SHARE * target
    return [top / REPLICA_ETA ** (REPLICA_RUNGS - 1 - r) for r in range(REPLICA_RUNGS)]


def run_job(job: Job) -> list[dict]:
    """One ladder or truth run in this process; its rows for the CSV."""
    import torch

    from search_spaces.residual_lm import ArchConfig
    from workers.budget import LadderConfig
    from workers.data import DataConfig, load_corpus
    from workers.train import OptimConfig, RunConfig
    from workers.trial import run_trial

    torch.set_num_threads(1)
    cfg = ArchConfig(**job.arch)
    if job.kind == "replica":
        return run_replica_job(job, cfg)
    ladder = LadderConfig(rungs=RUNGS if job.kind == "ladder" else 1, eta=ETA)
    result = run_trial(
        cfg,
        job.budget,
        load_corpus(DataConfig()),
        seed=job.seed,
        optim=OptimConfig(lr=3e-3, **job.rule),
        run=RunConfig(**RUN),
        width_probe=False,
        ladder=ladder,
    )
    base = job_fields(job, cfg, str(result.status)) | dict(
        wall_time_s=result.wall_time_s, compute_flops=result.training_flops + result.branch_flops
    )
    rungs = result.rungs or [dict(rung=0, budget_flops=job.budget, tokens=result.tokens_seen, val_loss=result.val_loss)]
    return [{**base, **{k: r[k] for k in ("rung", "budget_flops", "tokens", "val_loss")}} for r in rungs]


def job_fields(job: Job, cfg, status: str) -> dict:
    """The columns every row of a job shares: the config, its size and cost, the job's kind and seed."""
    from search_spaces.residual_lm import build_model, count_parameters, flops_per_token

    return dict(
        config=job.config,
        residual=cfg.residual,
        n_layers=cfg.n_layers,
        d_model=cfg.d_model,
        mod_rate=cfg.mod_rate,
        params=count_parameters(build_model(cfg)),
        executed_flops_per_token=flops_per_token(cfg).executed,
        kind=job.kind,
        seed=job.seed,
        status=status,
    )


def run_replica_job(job: Job, cfg) -> list[dict]:
    """Every replica rung of one config and seed, as a search's worker trains them (`run_replica_trial`)."""
    from workers.data import DataConfig, load_corpus
    from workers.replica import run_replica_trial
    from workers.train import OptimConfig, RunConfig

    result = run_replica_trial(
        cfg,
        job.budget,
        replica_rung_flops(job.budget),
        load_corpus(DataConfig()),
        seed=job.seed,
        optim=OptimConfig(lr=3e-3, **job.rule),
        run=RunConfig(**RUN),
        width_probe=False,
        min_width=job.min_width,
    )
    base = job_fields(job, cfg, str(result.status))
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
        for r in result.rungs
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
    rows = read(out) if out.exists() else []
    return pending(todo, rows, lambda j: (j.config, j.kind, j.seed), lambda r: (r["config"], r["kind"], r["seed"]))


def build(out: Path, all_jobs: list[Job], processes: int = 2) -> None:
    """Run the jobs `out` lacks, appending their rows (a killed build resumes where it stopped)."""
    columns = REPLICA_COLUMNS if any(j.kind == "replica" for j in all_jobs) else COLUMNS
    append_runs(out, pending_jobs(out, all_jobs), run_job, columns=columns, processes=processes)


def read(path: Path) -> list[dict]:
    with path.open() as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in (
            "config",
            "n_layers",
            "d_model",
            "params",
            "seed",
            "rung",
            "tokens",
            "replica_d_model",
            "replica_params",
        ):
            if k in r:
                r[k] = int(r[k])
        for k in (
            "mod_rate",
            "executed_flops_per_token",
            "budget_flops",
            "val_loss",
            "compute_flops",
            "wall_time_s",
            "tokens_per_param",
            "target_tokens_per_param",
        ):
            if k in r:
                r[k] = float(r[k])
        if "on_path" in r:
            r["on_path"] = r["on_path"] == "True"
    return rows


def truth_runs(rows: list[dict]) -> dict[int, list[float]]:
    """Each config's losses at T, one per seed (the truth is their mean)."""
    runs: dict[int, list[float]] = {}
    for r in rows:
        if r["kind"] == "truth":
            runs.setdefault(r["config"], []).append(r["val_loss"])
    return runs


def tau(a: dict[int, float], b: dict[int, float]) -> float | None:
    """Kendall tau-b over the keys both have (None below 3 of them: not a ranking)."""
    keys = sorted(set(a) & set(b))
    if len(keys) < 3:
        return None
    value = float(kendalltau([a[k] for k in keys], [b[k] for k in keys]).statistic)
    return value if math.isfinite(value) else None


def search_view(points: list[RungPoint], flops: dict[int, float], target: float) -> tuple[list[RungPoint], set[int]]:
    """The rung points a search holds, and the configs it repeated: seed 0 of every config, and the other
    seeds of the configs on the front at T predicted from seed 0 (`nas search --repeat-seeds 1`: its
    repeats, a ladder run of another seed each). The table holds both seeds of every config; a search does
    not pay for, nor see, the second seed of a config off its front."""
    front = front_of(predictions([p for p in points if p.seed == 0], target), flops)
    return [p for p in points if p.seed == 0 or p.trial in front], front


def as_rows(losses: dict[int, float], flops: dict[int, float]) -> list[FrontPoint]:
    """Configs as the completed trial rows `nas.pareto` reads."""
    return [FrontPoint(number=c, val_loss=loss, executed_flops_per_token=flops[c]) for c, loss in losses.items()]


def front_of(losses: dict[int, float], flops: dict[int, float]) -> set[int]:
    """The configs non-dominated by (loss, executed FLOPs per token)."""
    return {r.number for r in pareto_rows(as_rows(losses, flops))}


def predictions(points: list[RungPoint], target: float) -> dict[int, float]:
    fit = fit_study(points)
    return {t: fit.predict(t, target) for t in fit.trials}


def replay_promotion(
    rung_points: list[RungPoint], flops: dict[int, float], target: float, eta: float = ETA
) -> dict[int, int]:
    """The rungs each config would have reached in a search: configs arrive in table order, and at each
    rung the best ceil(n/eta) so far (non-dominated sorting on predicted loss at T and FLOPs) climb."""
    reached: dict[int, int] = {}
    seen: list[RungPoint] = []
    for config in sorted(flops):
        mine = sorted((p for p in rung_points if p.trial == config and p.seed == 0), key=lambda p: p.flops)
        for rung, point in enumerate(mine):
            seen.append(point)
            reached[config] = rung + 1
            if rung == len(mine) - 1:
                break
            preds = predictions([p for p in seen if p.flops <= point.flops], target)
            at_rung = [Candidate(c, preds.get(c, math.inf), flops[c]) for c in reached if reached[c] > rung]
            if not should_promote(config, at_rung, eta):
                break
    return reached


def report(
    path: Path,
    out: Path,
    replica_path: Path | None = None,
    floor_paths: Sequence[Path] = (),
    dashboard_summary: Path | None = None,
) -> dict:
    """Grade the tables; write `out` (JSON and PNG) and, if given, `dashboard_summary`: the summary alone,
    which the dashboard ships as package data."""
    rows = read(path)
    ladder = [r for r in rows if r["kind"] == "ladder"]
    truth_rows = [r for r in rows if r["kind"] == "truth"]
    runs_at_truth = truth_runs(rows)
    truth = {c: float(np.mean(v)) for c, v in runs_at_truth.items()}  # the seed mean: the truth's noise / sqrt(n)
    truth_seed = {s: {r["config"]: r["val_loss"] for r in truth_rows if r["seed"] == s} for s in (0, 1)}
    target = next(r["budget_flops"] for r in rows if r["kind"] == "truth")
    points = [RungPoint(r["config"], r["residual"], r["budget_flops"], r["val_loss"], r["seed"]) for r in ladder]
    flops = {r["config"]: r["executed_flops_per_token"] for r in ladder}
    view, repeated = search_view(points, flops, target)
    predicted = predictions(view, target)
    lowest = {r["config"]: r["val_loss"] for r in ladder if r["seed"] == 0 and r["rung"] == 0}
    top = {r["config"]: r["val_loss"] for r in ladder if r["seed"] == 0 and r["rung"] == RUNGS - 1}
    params = {r["config"]: -float(r["params"]) for r in ladder}  # bigger is better: rank by -params
    reached = replay_promotion(points, flops, target)
    replay_points = [
        RungPoint(r["config"], r["residual"], r["budget_flops"], r["val_loss"], 0)
        for r in ladder
        if r["seed"] == 0 and r["rung"] < reached[r["config"]]
    ]
    predicted_replay = predictions(replay_points, target)
    order = sorted(truth, key=truth.get)
    crossings = sum(
        1 for a, b in itertools.combinations(truth, 2) if (lowest[a] - lowest[b]) * (truth[a] - truth[b]) < 0
    )
    run_compute = {(r["config"], r["seed"]): r["compute_flops"] for r in ladder}
    ladder_compute = sum(v for (c, seed), v in run_compute.items() if seed == 0 or c in repeated)
    truth_compute = sum(r["compute_flops"] for r in rows if r["kind"] == "truth" and r["seed"] == 0)
    summary = {
        "configs": len(truth),
        "target_flops": target,
        "rung_flops": sorted({r["budget_flops"] for r in ladder}),
        "kendall_tau": {
            "prediction": tau(predicted, truth),
            "prediction_every_seed_of_every_config": tau(predictions(points, target), truth),
            "prediction_with_promotion": tau(predicted_replay, truth),
            "lowest_rung": tau(lowest, truth),
            "top_rung": tau(top, truth),
            "parameter_count": tau(params, truth),
            "truth_seed_vs_seed": tau(truth_seed[0], truth_seed[1]),
        },
        "kendall_tau_vs_seed0_truth": {
            "prediction": tau(predicted, truth_seed[0]),
            "lowest_rung": tau(lowest, truth_seed[0]),
            "top_rung": tau(top, truth_seed[0]),
            "parameter_count": tau(params, truth_seed[0]),
        },
        "truth_seeds_per_config": float(np.mean([len(v) for v in runs_at_truth.values()])),
        "prediction_mean_abs_error": float(np.mean([abs(predicted[c] - truth[c]) for c in truth])),
        "ladder_check": ladder_check(ladder),
        "true_best_in_predicted_top3": order[0] in sorted(predicted, key=predicted.get)[:3],
        "hypervolume_ratio": hv_ratio(predicted, truth, flops),
        "hypervolume_ratio_nadir": hv_ratio(predicted, truth, flops, nadir=True),
        "hypervolume_ratio_nadir_top_rung": hv_ratio(top, truth, flops, nadir=True),
        "hypervolume_ratio_nadir_lowest_rung": hv_ratio(lowest, truth, flops, nadir=True),
        "repeated_front": sorted(repeated),
        "ladder_compute_share": ladder_compute / truth_compute,
        "ladder_compute_share_every_seed_of_every_config": sum(run_compute.values()) / truth_compute,
        "ladder_compute_share_with_promotion": promoted_share(ladder, reached, truth_compute),
        "truth_pairs_crossing_from_lowest_rung": crossings,
        "truth_pairs": math.comb(len(truth), 2),
        "rung_seed_noise": seed_noise(points),
        "truth_seed_noise": seed_noise(
            [RungPoint(r["config"], "-", r["budget_flops"], r["val_loss"], r["seed"]) for r in truth_rows]
        ),
        "truth_spread_sd": float(np.std(list(truth.values()), ddof=1)),
        "tau_ceiling": tau_ceiling(truth_rows, runs_at_truth),
        "tau_ceiling_seed0_truth": tau_ceiling(truth_rows, {c: [loss] for c, loss in truth_seed[0].items()}),
        "goals": {"prediction_tau": 0.8, "hypervolume_ratio": 0.95, "ladder_compute_share": 0.15},
    }
    noise = summary["truth_seed_noise"]
    summary["budget_ladder_graded"] = {
        "prediction": grade(predicted, truth, flops, noise),
        "prediction_with_promotion": grade(predicted_replay, truth, flops, noise),
        "top_rung": grade(top, truth, flops, noise),
        "lowest_rung": grade(lowest, truth, flops, noise),
        "parameter_count": grade(params, truth, flops, noise),
    }
    if replica_path is not None and replica_path.exists():
        replica_rows = read(replica_path)
        summary["replica_ladder"] = replica_report(replica_rows, truth, truth_compute, noise, target)
        tables = [replica_rows] + [read(p) for p in floor_paths]
        # keyed by the narrowest replica a table holds: the width floor it was built with, where that binds
        summary["replica_ladder_by_narrowest_width"] = {
            str(min(r["replica_d_model"] for r in rows)): floor_summary(
                [r for r in rows if r["seed"] == 0], truth, truth_compute, noise, target
            )
            for rows in tables
        }
        summary["budget_ladder_wall_time_s_seed0"] = sum(
            {r["config"]: r["wall_time_s"] for r in ladder if r["seed"] == 0}.values()
        )
    result = {
        "summary": summary,
        "machine": machine_info(),
        "runs_csv": str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path),
        "per_config": [
            {
                "config": c,
                "truth": truth[c],
                "predicted": predicted.get(c),
                "lowest_rung": lowest[c],
                "top_rung": top.get(c),
                "rungs_reached_with_promotion": reached.get(c),
                "executed_flops_per_token": flops[c],
                "params": -params[c],
            }
            for c in sorted(truth)
        ],
    }
    write_json(out, result)
    plot(result, out.with_suffix(".png"))
    if dashboard_summary is not None:
        dashboard_summary.write_text(json.dumps({"summary": summary, "machine": result["machine"]}, indent=2) + "\n")
    return result


def grade(predicted: dict[int, float], truth: dict[int, float], flops: dict[int, float], noise: float) -> dict:
    """How good a ranking at T is: Kendall tau-b vs the truth, regret (the true loss of the predicted best
    minus the true best; nats and truth seed-noise units), whether the true best is in the predicted top 3,
    and the hypervolume of the predicted front scored on true losses over the true front's (nadir reference)."""
    best = min(truth, key=truth.get)
    chosen = min((c for c in truth if c in predicted), key=predicted.get)
    regret = truth[chosen] - truth[best]
    return {
        "kendall_tau": tau(predicted, truth),
        "regret_nats": regret,
        "regret_in_seed_noise": regret / noise,
        "true_best_in_predicted_top3": best in sorted((c for c in truth if c in predicted), key=predicted.get)[:3],
        "hypervolume_ratio_nadir": hv_ratio(predicted, truth, flops, nadir=True),
    }


def replica_report(
    replica_rows: list[dict], truth: dict[int, float], truth_compute: float, noise: float, t_flops: float
) -> dict:
    """The replica ladder graded as a search runs it, beside its own baselines.

    A search holds seed 0 of every config and the second seed of the configs on the front it predicts
    (`search_view`); promotion (eta 2, configs in table order) decides which rungs it pays for. Its
    answer is the predictor its backtest chose (`nas.backtest`: the fit, or the top rung carried)."""
    from nas.backtest import backtest, rung_below_top
    from nas.extrapolate import leave_one_out
    from nas.fidelity import fit_group

    flops = {r["config"]: r["executed_flops_per_token"] for r in replica_rows}
    group = fit_group(None, replica=True)  # one exponent along the path, as a search fits replica rungs
    points = [RungPoint(r["config"], group, r["budget_flops"], r["val_loss"], r["seed"]) for r in replica_rows]
    reached = replay_promotion(points, flops, t_flops, eta=REPLICA_ETA)
    promoted = [p for p in points if _rung_of(p, replica_rows) < reached[p.trial]]
    view, repeated = search_view(promoted, flops, t_flops)
    predicted = predictions(view, t_flops)
    loo = [r for r in (leave_one_out(view, c) for c in sorted(flops)) if r is not None]
    check = backtest(loo, rung_below_top(view))
    top_rung = {}
    for p in sorted(view, key=lambda p: p.flops):
        top_rung[p.trial] = p.loss if p.seed == 0 else top_rung.get(p.trial, p.loss)
    answer = predicted if check.chosen == "fit" else top_rung
    seed0 = [p for p in points if p.seed == 0]
    by_rung = {
        k: {r["config"]: r["val_loss"] for r in replica_rows if r["seed"] == 0 and r["rung"] == k}
        for k in range(REPLICA_RUNGS)
    }
    spent = sum(
        r["compute_flops"]
        for r in replica_rows
        if r["rung"] < reached[r["config"]] and (r["seed"] == 0 or r["config"] in repeated)
    )
    ratio = [r["tokens_per_param"] / r["target_tokens_per_param"] for r in replica_rows]
    methods = {
        "answer (backtest's choice)": grade(answer, truth, flops, noise),
        "fit, promotion as a search runs it": grade(predicted, truth, flops, noise),
        "fit, every rung, seed 0": grade(predictions(seed0, t_flops), truth, flops, noise),
        "fit, every rung, both seeds": grade(predictions(points, t_flops), truth, flops, noise),
        "top replica rung alone (seed 0)": grade(by_rung[REPLICA_RUNGS - 1], truth, flops, noise),
        "lowest replica rung alone (seed 0)": grade(by_rung[0], truth, flops, noise),
    }
    return {
        "rung_flops": replica_rung_flops(t_flops),
        "backtest": check.__dict__ | {"description": check.describe()},
        "methods": methods,
        "compute_share": spent / truth_compute,
        "compute_share_every_rung_seed0": sum(r["compute_flops"] for r in replica_rows if r["seed"] == 0)
        / truth_compute,
        "rungs_reached_with_promotion": reached,
        "repeated_front": sorted(repeated),
        "tokens_per_param_over_target": {
            "min": float(np.min(ratio)),
            "median": float(np.median(ratio)),
            "max": float(np.max(ratio)),
        },
        "off_path_rungs": sum(not r["on_path"] for r in replica_rows),
        "replica_width_share": {
            "min": min(r["replica_d_model"] / r["d_model"] for r in replica_rows),
            "max": max(r["replica_d_model"] / r["d_model"] for r in replica_rows),
        },
        "wall_time_s_seed0": sum(r["wall_time_s"] for r in replica_rows if r["seed"] == 0),
        "rung_seed_noise": seed_noise(points),
        "predicted": predicted,
        "goals": {
            "kendall_tau": 0.8,
            "regret_in_seed_noise": 1.0,
            "true_best_in_predicted_top3": True,
            "compute_share": 0.2,
        },
    }


def floor_summary(rows: list[dict], truth: dict[int, float], truth_compute: float, noise: float, t: float) -> dict:
    """Seed 0 of a replica table graded as a search runs it, with its wall time: one width floor's trade-off."""
    graded = replica_report(rows, truth, truth_compute, noise, t)
    keep = ("fit, promotion as a search runs it", "fit, every rung, seed 0", "top replica rung alone (seed 0)")
    return {
        "methods": {k: graded["methods"][k] for k in keep},
        "compute_share": graded["compute_share"],
        "off_path_rungs": graded["off_path_rungs"],
        "rungs": len(rows),
        "wall_time_s_seed0": graded["wall_time_s_seed0"],
        "wall_time_s_seed0_promoted": sum(
            r["wall_time_s"] for r in rows if r["rung"] < graded["rungs_reached_with_promotion"][r["config"]]
        ),
    }


def _rung_of(point: RungPoint, rows: list[dict]) -> int:
    return next(r["rung"] for r in rows if r["config"] == point.trial and r["budget_flops"] == point.flops)


def tau_ceiling(truth_rows: list[dict], runs: dict[int, list[float]]) -> float | None:
    """The Kendall tau a perfect predictor of each config's expected loss would reach against a noisy truth:
    the mean of `runs[c]` (one loss per seed) per config.

    With seed noise s (pooled over the repeated truth runs), n seeds per config and spread sd of the
    truth (the seed means), the share of the truth's variance that is signal is r = 1 - s^2 / (n sd^2);
    for Gaussian scores the correlation of the expected loss with the truth is sqrt(r), and Kendall
    tau = (2 / pi) arcsin(correlation) (Greiner's relation).
    """
    noise = seed_noise([RungPoint(r["config"], "-", r["budget_flops"], r["val_loss"], r["seed"]) for r in truth_rows])
    spread = float(np.std([np.mean(v) for v in runs.values()], ddof=1))
    if noise is None or spread == 0.0:
        return None
    n = float(np.mean([len(v) for v in runs.values()]))
    return 2.0 / math.pi * math.asin(math.sqrt(max(0.0, 1.0 - noise**2 / (n * spread**2))))


def ladder_check(ladder: list[dict]) -> dict:
    """What a user can check on their own ladder, without the far budget: fit every rung but the top one
    (both seeds) and predict the top one; Kendall tau and mean absolute error against its seed mean."""
    top_flops = max(r["budget_flops"] for r in ladder)
    below = [RungPoint(r["config"], r["residual"], r["budget_flops"], r["val_loss"], r["seed"]) for r in ladder]
    predicted = predictions([p for p in below if p.flops < top_flops], top_flops)
    measured: dict[int, list[float]] = {}
    for r in ladder:
        if r["budget_flops"] == top_flops:
            measured.setdefault(r["config"], []).append(r["val_loss"])
    observed = {c: float(np.mean(v)) for c, v in measured.items()}
    return {
        "kendall_tau": tau(predicted, observed),
        "mean_abs_error": float(np.mean([abs(predicted[c] - observed[c]) for c in observed])),
        "extrapolation": f"rungs below {top_flops:.3g} FLOPs -> {top_flops:.3g}",
    }


def hv_ratio(
    predicted: dict[int, float], truth: dict[int, float], flops: dict[int, float], *, nadir: bool = False
) -> float:
    """Hypervolume of the predicted front, each point at its TRUE loss, over the true front's hypervolume.

    Reference loss ln 256 (a uniform guess) as in a search; with `nadir`, the worst true loss instead:
    against ln 256 the cheapest config alone holds nearly all of the hypervolume (every loss here is far
    below ln 256), so only the nadir ratio shows a front member missed."""
    ref = (max(truth.values()) if nadir else math.log(256), 1.1 * max(flops.values()))
    chosen = front_of({c: predicted[c] for c in truth}, flops)
    scored = [r for r in as_rows(truth, flops) if r.number in chosen]
    return hypervolume(scored, ref) / hypervolume(as_rows(truth, flops), ref)


def promoted_share(ladder: list[dict], reached: dict[int, int], truth_compute: float) -> float:
    """The ladder compute a search would spend (seed 0, rungs reached when promoting) over the truth's."""
    spent = 0.0
    for r in ladder:
        if r["seed"] == 0 and r["rung"] == reached[r["config"]] - 1:
            spent += r["budget_flops"]
    return spent / truth_compute


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per, taus = result["per_config"], dict(result["summary"]["kendall_tau"])
    replica = result["summary"].get("replica_ladder")
    panels = [("predicted", "prediction", "budget ladder"), ("lowest_rung", "lowest_rung", "lowest rung")]
    if replica is not None:
        for p in per:
            p["replica_predicted"] = replica["predicted"].get(str(p["config"]), replica["predicted"].get(p["config"]))
        taus["replica_ladder_answer"] = replica["methods"]["answer (backtest's choice)"]["kendall_tau"]
        panels.insert(0, ("replica_predicted", "replica_ladder_answer", "replica ladder"))
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(5 * (len(panels) + 1), 4.5))
    for ax, (key, name, title) in zip(axes, panels, strict=False):
        ax.scatter([p["truth"] for p in per], [p[key] for p in per], c=np.log10([p["params"] for p in per]))
        value = taus[name]
        ax.set(
            xlabel="true loss at T (nats/token)",
            ylabel=f"{title} (nats/token)",
            title=f"{title}: tau {'-' if value is None else f'{value:.2f}'} (colour: log10 params)",
        )
    axes[-1].barh(list(taus), [np.nan if v is None else v for v in taus.values()])
    axes[-1].axvline(0.8, color="k", ls="--", lw=1)
    ceiling = result["summary"].get("tau_ceiling")
    if ceiling is not None:
        axes[-1].axvline(ceiling, color="tab:red", ls=":", lw=1.5)
    axes[-1].set(
        xlabel="Kendall tau-b vs the truth (goal 0.8 dashed; noise ceiling red dotted)",
        title="rank agreement",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("build", "build-replicas", "report"))
    parser.add_argument("--runs", type=Path, default=RUNS_CSV)
    parser.add_argument("--replica-runs", type=Path, default=REPLICA_CSV)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "fidelity.json")
    parser.add_argument("--smoke", action="store_true", help="tiny budgets and 3 configs: every path, no meaning")
    parser.add_argument("--space", type=Path, help="build: train under this space file's horizon rule (if any)")
    parser.add_argument("--seeds", default="0,1", help="build: the seeds to train, comma-separated")
    parser.add_argument("--min-width", type=int, default=8, help="build-replicas: the narrowest replica width")
    parser.add_argument("--processes", type=int, default=2, help="build: jobs run in parallel")
    parser.add_argument("--dashboard-summary", type=Path, help="report: also write the summary here (package data)")
    parser.add_argument(
        "--floor-runs", type=Path, action="append", default=[], help="report: replica rows built at a wider --min-width"
    )
    args = parser.parse_args()
    seeds = tuple(int(s) for s in args.seeds.split(","))
    if args.command == "build":
        build(args.runs, jobs(args.smoke, horizon_rule(args.space), seeds=seeds), args.processes)
    elif args.command == "build-replicas":
        todo = jobs(args.smoke, horizon_rule(args.space), ("replica",), seeds, args.min_width)
        build(args.replica_runs, todo, args.processes)
    else:
        result = report(args.runs, args.out, args.replica_runs, args.floor_runs, args.dashboard_summary)
        print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
