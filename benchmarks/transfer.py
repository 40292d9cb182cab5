"""Does the best learning rate stay put across widths and depths? `standard` versus `completep`.

    python -m benchmarks.transfer build  --runs benchmarks/data/transfer_runs.csv    # ~2.5 h here, all tables
    python -m benchmarks.transfer report --runs benchmarks/data/transfer_runs.csv --out benchmarks/results/transfer.json
    python -m benchmarks.transfer build --smoke --runs /tmp/t.csv    # every path, tiny (then `report`)

`build` trains, with `workers.trial.run.run_trial` on the shipped corpus, every family under both
parametrizations at every learning rate of `RATES` (8, log-spaced by 2x, 5e-4 to 6.4e-2) and every shape of
two sweeps: a width sweep d = 64, 128, 256 at L = 4 and a depth sweep L = 2, 4, 8, 16 at d = 64, all
at one training budget (iso-FLOP: a smaller shape trains on more tokens, as in a search). The
`completep` base shape is (d_0, L_0) = (64, 4), the point both sweeps share, where both
parametrizations are the same model. seq 64, batch 8, 4 heads, seed 0, 1 torch thread per job,
2 jobs at a time. Rows are appended to the CSV as they finish; a rerun skips the rows it has.

It then runs the iso-token check (every family, into `<runs>_iso_tokens.csv`): the base shape trained
for as many steps as the widest shape, and the shallowest for as many as the deepest, every rate, both
parametrizations, so that a pair differs in size only, not in horizon (at iso-FLOP a bigger model
also trains for fewer steps, and shorter runs want higher rates); and the horizon check (into
`<runs>_horizon.csv`): the base shape trained for 100, 400 and 1470 steps (its iso-FLOP horizon), every
family and rate, and NAG again with its gate and alpha rates uncapped (`OptimConfig.nag_gate_lr` 1), which
measures how fast each family's best rate moves with the horizon alone. Last, the horizon rule's check
(into `<runs>_horizon_rule.csv`): the iso-FLOP sweep again under `completep` with `OptimConfig`'s horizon
rule on (a run of D tokens uses lr (D / D_0)^-beta, D_0 the base shape's tokens in the sweep, beta the
family's from the horizon check, `rule_exponents`, and D clamped to the check's horizons), for every family
whose beta is not 0; and the seed check (into `<runs>_seeds.csv`): the depth sweep's shallowest and base
shapes under `completep`, cascaded and ANCRe, every rate, seeds 0 and 1, which measures how far a best rate
moves with the seed alone.

`report` reads the table and writes, per family and parametrization:
- each shape's best rate, refined by a parabola through the three lowest points in log(lr);
- the drift of the best rate across the width sweep and across the depth sweep (max / min): the
  goal is within 2x under `completep`, and larger under `standard`;
- each shape's loss at its own best rate and at the base shape's best rate (what a search gets
  when it does not search the rate), under both;
and, for the search, a replay on the table: how many trials a search (TPE,
random) over (family, shape) needs to reach 95% of the table's hypervolume (val loss vs executed FLOPs per
token) when it (a) samples the rate per trial from all of them under `standard`, (b) uses the base
shape's best rate under `standard`, (c) uses the base shape's best rate under `completep`; from the
iso-token table, each family's and pair's best-rate drift; and from the horizon table, each family's
exponent beta (lr* ~ steps^-beta) and the drift that the step counts alone of each iso-FLOP sweep imply;
and from the rule's table, the drift and losses above again for `completep_horizon` (completep with the
rule: a rate is the base rate; completep's own rows stand for a family whose beta is 0). The rule's runs read
a different validation set from the iso-FLOP table's (`RULE_ROWS_NOTE`), so the replay leaves them out.
From the seed table: each seed's best rates and drift, the seeds' ratio per shape, and both from the seeds'
mean loss. Five checks of one question (does the learning rate transfer?) over one table of runs.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import statistics
from pathlib import Path

import numpy as np

from benchmarks.harness import FAMILIES, append_runs, machine_info, pending, write_json
from nas.answer.pareto import FrontPoint
from workers.status import TrialStatus

PARAMETRIZATIONS = ("standard", "completep")
RULE = "completep_horizon"  # the report's label for the horizon rule check's rows: completep + the horizon rule
REPORTED = (*PARAMETRIZATIONS, RULE)
RULE_ROWS_NOTE = (
    "completep_horizon: the rule's own runs for a family with beta != 0, evaluated on held-out windows spread "
    "over the text (the iso-FLOP table's runs predate that and read the first 128 windows, ~0.07 nats higher): "
    "compare its best rates and drifts, not its losses with the other parametrizations'; the search replay "
    "leaves it out for that reason"
)
RATES = (5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2, 6.4e-2)
BASE = (64, 4)  # (d_0, L_0)
WIDTHS = (64, 128, 256)  # at L_0
DEPTHS = (2, 4, 8, 16)  # at d_0
BUDGET = 1e12
SEQ_LEN, BATCH, HEADS = 64, 8, 4
SMOKE = dict(base=(32, 2), widths=(32, 64), depths=(1, 3), budget=1e9, rates=(3e-3, 1e-2))
COLUMNS = ["family", "parametrization", "d_model", "n_layers", "lr", "status", "val_loss",
           "executed_flops_per_token", "tokens_seen", "steps", "wall_time_s", "nag_gate_lr", "horizon_tokens",
           "horizon_exponent", "lr_used", "seed"]  # fmt: skip
NAG_GATE_LR = 1e-3  # OptimConfig's cap on NAG's gate and alpha rates (a table without the column used it)
UNCAPPED = 1.0  # the horizon check's NAG variant: gates and alphas at the model's rate (for lr <= 1)
HORIZONS = (100, 400, 1470)  # steps of the horizon check (1470: the base shape's at the iso-FLOP budget)
SMOKE_HORIZONS = (4, 8)


def arch(family: str, parametrization: str, d_model: int, n_layers: int, base: tuple[int, int]):
    from search_spaces.residual_lm import ArchConfig

    return ArchConfig(
        residual=family, d_model=d_model, n_layers=n_layers, n_heads=HEADS, seq_len=SEQ_LEN,
        parametrization=parametrization, base_width=base[0], base_depth=base[1],
    )  # fmt: skip


def run_one(job: tuple) -> dict:
    import torch

    from search_spaces.residual_lm import flops_per_token
    from workers.data.config import DataConfig
    from workers.data.corpus import load_corpus
    from workers.training.plans import plan_budget
    from workers.training.train import OptimConfig, RunConfig
    from workers.trial.run import run_trial

    torch.set_num_threads(1)
    family, parametrization, d_model, n_layers, lr, base, budget, *rest = job
    gate_lr, (horizon_tokens, beta, span), seed = job_extras(rest)
    cfg = arch(family, parametrization, d_model, n_layers, base)
    run = RunConfig(batch_size=BATCH, eval_sequences=128, evals=1)
    optim = OptimConfig(
        lr=lr, nag_gate_lr=gate_lr, horizon_tokens=horizon_tokens, horizon_exponents={family: beta}, horizon_span=span
    )
    result = run_trial(cfg, budget, load_corpus(DataConfig()), seed=seed, run=run, optim=optim, width_probe=False)
    return {
        "family": family, "parametrization": parametrization, "d_model": d_model, "n_layers": n_layers,
        "lr": lr, "status": str(result.status),
        "val_loss": result.val_loss if result.val_loss is not None and math.isfinite(result.val_loss) else math.inf,
        "executed_flops_per_token": flops_per_token(cfg).executed, "tokens_seen": result.tokens_seen,
        "steps": result.tokens_seen // (BATCH * SEQ_LEN), "wall_time_s": round(result.wall_time_s, 2),
        "nag_gate_lr": gate_lr, "horizon_tokens": horizon_tokens or "", "horizon_exponent": beta,
        "lr_used": optim.at_horizon(family, plan_budget(cfg, budget, BATCH).tokens).lr, "seed": seed,
    }  # fmt: skip


def job_extras(rest: list) -> tuple[float, tuple, int]:
    """A job's optional tail (gate_lr, horizon, seed) with its defaults: the NAG gate cap, no horizon rule
    ((horizon_tokens, beta, span) for the rule's check), seed 0."""
    gate_lr = rest[0] if rest else NAG_GATE_LR
    horizon = rest[1] if len(rest) > 1 and rest[1] else (None, 0.0, None)
    return gate_lr, horizon, rest[2] if len(rest) > 2 else 0


def gate_lr_of(row: dict) -> float:
    return float(row.get("nag_gate_lr") or NAG_GATE_LR)


def job_key(row: dict) -> tuple:
    """A row's identity in its table: (family, parametrization, d, L, lr, NAG gate-rate cap)."""
    return (row["family"], row["parametrization"], int(row["d_model"]), int(row["n_layers"]), float(row["lr"]),
            gate_lr_of(row))  # fmt: skip


def horizon_key(row: dict) -> tuple:
    """`job_key` and the steps: the horizon check's table is the one holding a shape at several horizons."""
    return (*job_key(row), int(row["steps"]))


def seed_key(row: dict) -> tuple:
    """`job_key` and the seed: the seed check's table holds every run twice."""
    return (*job_key(row), int(row["seed"]))


def build(path: Path, smoke: bool) -> None:
    """The iso-FLOP table into `path`, then the iso-token check into `iso_token_path(path)`."""
    base = SMOKE["base"] if smoke else BASE
    widths, depths = (SMOKE["widths"], SMOKE["depths"]) if smoke else (WIDTHS, DEPTHS)
    shapes = sorted({(d, base[1]) for d in widths} | {(base[0], n) for n in depths})
    rates = SMOKE["rates"] if smoke else RATES
    budget = SMOKE["budget"] if smoke else BUDGET
    jobs = [
        (f, p, d, n, lr, base, budget)
        for d, n in sorted(shapes, key=lambda s: -s[0] * s[0] * s[1])  # the longest runs first
        for f in FAMILIES for p in PARAMETRIZATIONS for lr in rates
    ]  # fmt: skip
    run_jobs(jobs, path)
    run_jobs(iso_token_jobs(base, max(widths), (min(depths), max(depths)), rates, budget), iso_token_path(path))
    run_jobs(horizon_jobs(base, SMOKE_HORIZONS if smoke else HORIZONS, rates), horizon_path(path), key=horizon_key)
    rule_jobs = horizon_rule_jobs(read_rows(path), read_rows(horizon_path(path)), rates, budget)
    run_jobs(rule_jobs, horizon_rule_path(path))
    run_jobs(seed_check_jobs(base, min(depths), rates, budget), seed_path(path), key=seed_key)


def iso_token_path(path: Path) -> Path:
    return path.with_name(path.stem + "_iso_tokens.csv")


def horizon_path(path: Path) -> Path:
    return path.with_name(path.stem + "_horizon.csv")


def horizon_rule_path(path: Path) -> Path:
    return path.with_name(path.stem + "_horizon_rule.csv")


def rule_exponents(horizon_rows: list[dict]) -> dict[str, float]:
    """Each family's beta for the horizon rule, from the horizon check (2 decimals): 0 where the best rate it
    implies moves by less than the rate grid's 2x step over the whole span of horizons measured (the check
    cannot tell such a beta from 0)."""
    check = horizon_check(horizon_rows, {})
    out = {}
    for family in FAMILIES:
        if family in check:
            steps = [int(h) for h in check[family]["best_lr"]]
            beta = check[family]["beta"]
            out[family] = round(beta, 2) if (max(steps) / min(steps)) ** abs(beta) >= 2.0 else 0.0
    return out


def horizon_rule_jobs(rows: list[dict], horizon_rows: list[dict], rates, budget: float) -> list[tuple]:
    """The horizon rule's check: the iso-FLOP sweep again under `completep`, every family, shape and rate, with
    `OptimConfig`'s horizon rule on: `lr` is the base rate at the base shape's token count in the sweep
    (`horizon_tokens`) and a shape trained on D tokens uses lr (D / horizon_tokens)^-beta, beta the family's
    exponent from the horizon check (NAG's with capped gates, as the sweep ran) and D clamped to the check's
    span of horizons (`horizon_span`). Measured for real rather than read off the sweep by relabelling its
    rates, so that the rule as the code applies it is what is graded."""
    base = _base_shape(rows)
    betas = rule_exponents(horizon_rows)
    steps = [r["steps"] for r in horizon_rows]
    span = (min(steps) * BATCH * SEQ_LEN, max(steps) * BATCH * SEQ_LEN)  # the horizons beta was measured over
    jobs = []
    for family in FAMILIES:
        if not betas.get(family):  # beta 0: the rule changes nothing, the completep rows stand for it
            continue
        tokens = next(r["tokens_seen"] for r in rows if r["family"] == family and (r["d_model"], r["n_layers"]) == base)
        shapes = sorted({(r["d_model"], r["n_layers"]) for r in rows if r["family"] == family})
        jobs += [
            (family, "completep", d, n, lr, base, budget, NAG_GATE_LR, (tokens, betas[family], span))
            for d, n in shapes for lr in rates
        ]  # fmt: skip
    return sorted(jobs, key=lambda j: -j[2] * j[2] * j[3])


def seed_path(path: Path) -> Path:
    return path.with_name(path.stem + "_seeds.csv")


SEED_CHECK = dict(families=("cascaded", "ancre"), seeds=(0, 1))


def seed_check_jobs(base: tuple[int, int], shallowest: int, rates, budget: float) -> list[tuple]:
    """The seed check: the shallowest and the base shape of the depth sweep (the pair that sets cascaded's and
    ANCRe's depth drift under completep) at every rate, seeds 0 and 1, both run afresh on one validation set:
    how far a best rate moves between seeds, against the 2x the drift goal allows."""
    shapes = [(base[0], shallowest), base]
    return [
        (family, "completep", d, n, lr, base, budget, NAG_GATE_LR, None, seed)
        for d, n in shapes for family in SEED_CHECK["families"] for seed in SEED_CHECK["seeds"] for lr in rates
    ]  # fmt: skip


def seed_check(rows: list[dict]) -> dict:
    """Per family: each seed's best rate per shape and the drift between the shapes, the seeds' ratio per shape,
    and the same from the two seeds' mean loss."""
    out: dict = {}
    for family in sorted({r["family"] for r in rows}):
        mine = [r for r in rows if r["family"] == family]
        shapes = sorted({(r["d_model"], r["n_layers"]) for r in mine})
        seeds = sorted({r["seed"] for r in mine})
        name = {s: f"d{s[0]}_L{s[1]}" for s in shapes}
        per_seed = {seed: {s: _best_rate_of(mine, s, seed) for s in shapes} for seed in seeds}
        mean = {s: _best_rate_of(mine, s) for s in shapes}
        out[family] = {
            "best_lr_per_seed": {str(seed): {name[s]: v for s, v in b.items()} for seed, b in per_seed.items()},
            "drift_per_seed": {str(seed): max(b.values()) / min(b.values()) for seed, b in per_seed.items()},
            "seed_ratio_per_shape": {
                name[s]: max(per_seed[k][s] for k in seeds) / min(per_seed[k][s] for k in seeds) for s in shapes
            },
            "best_lr_seed_mean": {name[s]: v for s, v in mean.items()},
            "drift_seed_mean": max(mean.values()) / min(mean.values()),
        }
    return out


def _best_rate_of(rows: list[dict], shape: tuple[int, int], seed: int | None = None) -> float:
    """The best rate of `shape` from one seed's rows, or from every seed's mean loss per rate (None)."""
    points: dict[float, list[float]] = {}
    for r in rows:
        if (r["d_model"], r["n_layers"]) == shape and (seed is None or r["seed"] == seed):
            points.setdefault(r["lr"], []).append(r["val_loss"])
    return best_rate([(lr, float(np.mean(v))) for lr, v in points.items()])[0]


def exact_steps_budget(cfg, steps: int) -> float:
    """The training FLOPs that buy exactly `steps` whole batches of `cfg`."""
    from search_spaces.residual_lm import training_flops

    return training_flops(cfg, steps * BATCH * SEQ_LEN) * (1 + 1e-6)


def horizon_jobs(base: tuple[int, int], horizons: tuple[int, ...], rates) -> list[tuple]:
    """The horizon check: the base shape (where both parametrizations are one model) trained for each number
    of steps in `horizons`, every family at every rate, and NAG once more with its gate and alpha rates
    uncapped. How the best rate moves with the horizon is what separates at iso-FLOP a width or depth rule
    from the number of steps a bigger shape gets."""
    jobs = []
    for steps in horizons:
        for family, gate_lr in [(f, NAG_GATE_LR) for f in FAMILIES] + [("nag", UNCAPPED)]:
            flops = exact_steps_budget(arch(family, "standard", *base, base), steps)
            jobs += [(family, "standard", *base, lr, base, flops, gate_lr) for lr in rates]
    return jobs


def iso_token_jobs(base: tuple[int, int], widest: int, depths: tuple[int, int], rates, budget: float) -> list[tuple]:
    """The iso-token check (every family): the base shape at the widest shape's token count, and the
    shallowest at the deepest's, so that a pair differs in size and not in the number of steps (the steps
    are cascaded's at `budget`, the same for every family)."""
    from search_spaces.residual_lm import tokens_for

    jobs = []
    for big, small in (((widest, base[1]), base), ((base[0], depths[1]), (base[0], depths[0]))):
        steps = round(tokens_for(arch("cascaded", "standard", *big, base), budget) / (BATCH * SEQ_LEN))
        for family, (d, n) in itertools.product(FAMILIES, (big, small)):
            cfg = arch(family, "standard", d, n, base)  # FLOPs per token do not depend on the parametrization
            jobs += [
                (family, p, d, n, lr, base, exact_steps_budget(cfg, steps)) for p in PARAMETRIZATIONS for lr in rates
            ]
    return jobs


def run_jobs(jobs: list[tuple], path: Path, *, key=job_key) -> None:
    """Run the jobs missing from `path` (2 at a time), appending each row as it finishes. `key`: a row's identity
    in the table (`horizon_key` includes its steps, so every job's budget must buy whole batches exactly;
    `seed_key` its seed). A table keeps the columns it was started with."""
    rows = read_rows(path) if path.exists() else []
    todo = pending(jobs, rows, lambda j: _planned_key(j, key), key)
    append_runs(path, todo, run_one_rows, columns=COLUMNS, describe=_describe)


def run_one_rows(job: tuple) -> list[dict]:
    return [run_one(job)]


def _describe(rows: list[dict]) -> str:
    return f"{job_key(rows[0])} loss {rows[0]['val_loss']:.4f}"


def _planned_key(job: tuple, key) -> tuple:
    """The `key` the job's row will have (its steps: the whole batches its budget buys)."""
    from search_spaces.residual_lm import training_flops

    family, par, d, n, lr, base, budget, *rest = job
    gate_lr, _, seed = job_extras(rest)
    steps = math.floor(budget / training_flops(arch(family, par, d, n, base), BATCH * SEQ_LEN))
    row = dict(family=family, parametrization=par, d_model=d, n_layers=n, lr=lr, steps=steps, nag_gate_lr=gate_lr,
               seed=seed)  # fmt: skip
    return key(row)


def read_rows(path: Path) -> list[dict]:
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        for col in ("d_model", "n_layers", "tokens_seen", "steps"):
            r[col] = int(r[col])
        r["seed"] = int(r.get("seed") or 0)  # a table without the column ran seed 0
        for col in ("lr", "val_loss", "executed_flops_per_token", "wall_time_s"):
            r[col] = float(r[col])
    return rows


def best_rate(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(lr*, loss at the best measured rate) from (lr, loss) points: a parabola in log lr through the
    lowest point and its two neighbours (the grid's edge: the edge rate itself)."""
    points = sorted(points)
    losses = [loss for _, loss in points]
    i = int(np.argmin(losses))
    if not 0 < i < len(points) - 1 or not all(map(math.isfinite, losses[i - 1 : i + 2])):
        return points[i][0], losses[i]
    x = [math.log(lr) for lr, _ in points[i - 1 : i + 2]]
    a, b, _ = np.polyfit(x, losses[i - 1 : i + 2], 2)
    vertex = -b / (2 * a) if a > 0 else x[1]
    return math.exp(min(max(vertex, x[0]), x[2])), losses[i]


def summarise(rows: list[dict]) -> dict:
    """Per family and parametrization: best rates, their drift over each sweep, losses (see the docstring)."""
    base = _base_shape(rows)
    out: dict = {"base_shape": list(base)}
    for family in FAMILIES:
        for par in REPORTED:
            mine = [r for r in rows if r["family"] == family and r["parametrization"] == par]
            if mine:
                out.setdefault(family, {})[par] = _sweep_summary(mine, base)
    return out


def _sweep_summary(rows: list[dict], base: tuple[int, int]) -> dict:
    def shape(r: dict) -> tuple[int, int]:
        return r["d_model"], r["n_layers"]

    shapes = sorted({shape(r) for r in rows})
    rates = sorted({r["lr"] for r in rows})
    best = {s: best_rate([(r["lr"], r["val_loss"]) for r in rows if shape(r) == s]) for s in shapes}
    base_lr = min((r for r in rows if shape(r) == base), key=lambda r: r["val_loss"])["lr"]
    at_base_lr = {s: next(r["val_loss"] for r in rows if shape(r) == s and r["lr"] == base_lr) for s in shapes}

    def drift(sweep: list[tuple[int, int]]) -> float:
        return max(best[s][0] for s in sweep) / min(best[s][0] for s in sweep)

    name = {s: f"d{s[0]}_L{s[1]}" for s in shapes}
    return {
        "best_lr": {name[s]: best[s][0] for s in shapes},
        "loss_at_best_lr": {name[s]: best[s][1] for s in shapes},
        "best_at_grid_edge": [name[s] for s in shapes if best[s][0] in (rates[0], rates[-1])],
        "base_best_lr": base_lr,
        "loss_at_base_lr": {name[s]: at_base_lr[s] for s in shapes},
        "width_drift": drift([s for s in shapes if s[1] == base[1]]),
        "depth_drift": drift([s for s in shapes if s[0] == base[0]]),
        "max_loss_given_up_at_base_lr": max(at_base_lr[s] - best[s][1] for s in shapes),
    }


def _base_shape(rows: list[dict]) -> tuple[int, int]:
    """The shape both sweeps share: the one whose width appears at several depths and depth at several widths."""
    shapes = {(r["d_model"], r["n_layers"]) for r in rows}
    return next(s for s in shapes if sum(t[0] == s[0] for t in shapes) > 1 and sum(t[1] == s[1] for t in shapes) > 1)


STRATEGIES = {  # name -> (parametrization, rate: "searched" over every rate, or the base shape's best)
    "standard_lr_searched": ("standard", "searched"),
    "standard_base_lr": ("standard", "base"),
    "completep_base_lr": ("completep", "base"),
}
REPLAY_SAMPLERS = ("random", "tpe")


def _as_row(number: int, r: dict) -> FrontPoint:
    """Row `number` of the table as `nas.answer.pareto` reads it."""
    status = TrialStatus.COMPLETED if math.isfinite(r["val_loss"]) else TrialStatus.DIVERGED
    return FrontPoint(number=number, val_loss=r["val_loss"], executed_flops_per_token=r["executed_flops_per_token"],
                      status=status)  # fmt: skip


def replay_search(rows: list[dict], summary: dict, seeds: int, n_trials: int) -> dict:
    """Trials an Optuna search over (family, shape[, lr]) needs to reach 95% of the table's hypervolume.

    The table's hypervolume is that of every row (both parametrizations, every rate): the best front
    any search here can find. Reference: 0.05 nats above the worst shape's loss at its best rate, and
    1.1 x the largest executed FLOPs per token (a config worse than every tuned one counts for nothing).
    """
    import optuna

    from nas.answer.pareto import hypervolume, hypervolume_curve
    from nas.search.study import make_sampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    worst_tuned = max(v for f in FAMILIES for p in PARAMETRIZATIONS if p in summary.get(f, {})
                      for v in summary[f][p]["loss_at_best_lr"].values())  # fmt: skip
    ref = (worst_tuned + 0.05, 1.1 * max(r["executed_flops_per_token"] for r in rows))
    points = [_as_row(i, r) for i, r in enumerate(rows)]
    full_hv = hypervolume(points, ref)
    table = {job_key(r)[:5]: p for r, p in zip(rows, points, strict=True)}  # (family, parametrization, d, L, lr)
    shapes = sorted({(r["d_model"], r["n_layers"]) for r in rows})
    rates = sorted({r["lr"] for r in rows})
    out: dict = {"reference_point": list(ref), "table_hypervolume": full_hv, "strategies": {}}
    for name, (par, rate) in STRATEGIES.items():
        reachable = [table[(f, par, d, n, lr)] for f in FAMILIES for d, n in shapes
                     for lr in (rates if rate == "searched" else [summary[f][par]["base_best_lr"]])]  # fmt: skip
        entry: dict = {"ceiling_share": hypervolume(reachable, ref) / full_hv}
        for sampler in REPLAY_SAMPLERS:
            curves = []
            for seed in range(seeds):
                picked = []

                def objective(trial, picked=picked, par=par, rate=rate):
                    family = trial.suggest_categorical("residual", list(FAMILIES))
                    d, n = shapes[trial.suggest_categorical("shape", list(range(len(shapes))))]
                    lr = (
                        trial.suggest_categorical("lr", rates)
                        if rate == "searched"
                        else summary[family][par]["base_best_lr"]
                    )
                    picked.append(table[(family, par, d, n, lr)])
                    return picked[-1].val_loss if math.isfinite(picked[-1].val_loss) else float("inf"), picked[
                        -1
                    ].executed_flops_per_token

                study = optuna.create_study(directions=["minimize", "minimize"], sampler=make_sampler(sampler, seed))
                study.optimize(objective, n_trials=n_trials)
                curves.append(np.array(hypervolume_curve(picked, ref)) / full_hv)
            curves_arr = np.array(curves)
            reach = [int(np.nonzero(c >= 0.95)[0][0]) + 1 if (c >= 0.95).any() else None for c in curves_arr]
            hits = [t for t in reach if t is not None]
            entry[sampler] = {
                "mean_share_per_trial": curves_arr.mean(axis=0).round(4).tolist(),
                "seeds_reaching_95pct": len(hits),
                "median_trials_to_95pct": statistics.median(hits) if hits else None,
                "mean_share_at_20_trials": float(curves_arr[:, min(19, n_trials - 1)].mean()),
            }
        out["strategies"][name] = entry
    return out


def plot(rows: list[dict], summary: dict, replay: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = tuple(summary["base_shape"])
    reported = [p for p in REPORTED if any(r["parametrization"] == p for r in rows)]
    fig, axes = plt.subplots(3, 2 * len(reported), figsize=(8.5 * len(reported), 11), squeeze=False)
    for i, family in enumerate(FAMILIES):
        for j, (par, sweep) in enumerate([(p, s) for p in reported for s in ("width", "depth")]):
            ax = axes[i][j]
            mine = [r for r in rows if r["family"] == family and r["parametrization"] == par]
            in_sweep = [r for r in mine if (r["n_layers"] == base[1] if sweep == "width" else r["d_model"] == base[0])]
            shapes = sorted({(r["d_model"], r["n_layers"]) for r in in_sweep})
            for d, n in shapes:
                pts = sorted((r["lr"], r["val_loss"]) for r in mine if (r["d_model"], r["n_layers"]) == (d, n))
                ax.plot([p[0] for p in pts], [min(p[1], 6.0) for p in pts], "o-", label=f"d{d} L{n}")
            ax.set_xscale("log")
            drift = summary[family][par][f"{sweep}_drift"] if par in summary.get(family, {}) else math.nan
            ax.set(title=f"{family}, {par}: {sweep} (best-lr drift {drift:.1f}x)", xlabel="learning rate",
                   ylabel="val loss (nats/token)")  # fmt: skip
            losses = [r["val_loss"] for r in mine if math.isfinite(r["val_loss"])]
            if losses:
                ax.set_ylim(min(losses) - 0.05, min(max(losses), min(losses) + 1.0))
            ax.legend(fontsize=7)
    fig.suptitle("Validation loss vs learning rate at equal training compute (iso-FLOP), standard vs completep "
                 "(vs completep with the horizon rule: the base rate at the base shape's horizon)")  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, entry in replay["strategies"].items():
        for sampler, style in (("random", "--"), ("tpe", "-")):
            curve = entry[sampler]["mean_share_per_trial"]
            ax.plot(range(1, len(curve) + 1), curve, style, label=f"{name} ({sampler})")
    ax.axhline(0.95, color="k", lw=0.6)
    ax.set(
        xlabel="trials", ylabel="hypervolume / table's", title="Search over (family, shape[, lr]) replayed on the table"
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path.with_name(path.stem + "_search.png"), dpi=100)
    plt.close(fig)


def iso_token_check(rows: list[dict]) -> dict:
    """Per family and pair of shapes trained for the same number of steps: each one's best rate and the drift.
    The base shape appears in two pairs at different step counts: a pair is (shape, steps)."""
    out: dict = {}
    for family in FAMILIES:
        mine = [r for r in rows if r["family"] == family]
        runs = sorted({(r["d_model"], r["n_layers"], r["steps"]) for r in mine})
        for par in PARAMETRIZATIONS:
            points = {
                run: [(r["lr"], r["val_loss"]) for r in mine if r["parametrization"] == par
                      and (r["d_model"], r["n_layers"], r["steps"]) == run]
                for run in runs
            }  # fmt: skip
            best = {run: best_rate(p)[0] for run, p in points.items() if p}
            for s, t in itertools.combinations(sorted(best), 2):
                if s[2] == t[2] and (s[0] == t[0] or s[1] == t[1]):
                    sweep = "depth" if s[0] == t[0] else "width"
                    out.setdefault(family, {}).setdefault(par, {})[sweep] = {
                        "shapes": [f"d{s[0]}_L{s[1]}", f"d{t[0]}_L{t[1]}"],
                        "steps": s[2],
                        "best_lr": [best[s], best[t]],
                        "drift": max(best[s], best[t]) / min(best[s], best[t]),
                    }
    return out


def horizon_check(rows: list[dict], sweep_steps: dict[str, list[int]]) -> dict:
    """Per family (and NAG with uncapped gate rates): the base shape's best rate at each horizon, and the
    exponent beta of lr* ~ steps^-beta (least squares in log-log). At iso-FLOP a shape trained for k times
    fewer steps wants k^beta times the rate whatever its width or depth: `horizon_drift` is that factor
    between the longest and the shortest run of each iso-FLOP sweep (`sweep_steps`: each shape's steps)."""
    out: dict = {}
    for family, gate_lr in [(f, NAG_GATE_LR) for f in FAMILIES] + [("nag", UNCAPPED)]:
        mine = [r for r in rows if r["family"] == family and math.isclose(gate_lr_of(r), gate_lr)]
        horizons = sorted({r["steps"] for r in mine})
        if len(horizons) < 2:
            continue
        best = {h: best_rate([(r["lr"], r["val_loss"]) for r in mine if r["steps"] == h]) for h in horizons}
        slope = float(np.polyfit(np.log(horizons), np.log([best[h][0] for h in horizons]), 1)[0])
        name = family if gate_lr == NAG_GATE_LR else f"{family}_gates_uncapped"
        out[name] = {
            "nag_gate_lr": gate_lr,
            "best_lr": {str(h): best[h][0] for h in horizons},
            "loss_at_best_lr": {str(h): best[h][1] for h in horizons},
            "beta": -slope,
            "horizon_drift": {sweep: (max(v) / min(v)) ** abs(slope) for sweep, v in sweep_steps.items()},
        }
    return out


def report(runs: Path, out: Path, seeds: int = 20, n_trials: int = 60) -> dict:
    rows = table = read_rows(runs)
    rule_path = horizon_rule_path(runs)
    if rule_path.exists():  # the rule check's rows as a third parametrization (the rate column: the base rate)
        ruled = read_rows(rule_path)
        families = {r["family"] for r in ruled}  # a family without rows has beta 0: its completep rows stand
        stand_in = [r for r in table if r["parametrization"] == "completep" and r["family"] not in families]
        rows = table + [dict(r, parametrization=RULE) for r in ruled + stand_in]
    summary = summarise(rows)
    iso_path = iso_token_path(runs)
    iso = iso_token_check(read_rows(iso_path)) if iso_path.exists() else None
    hor_path = horizon_path(runs)
    base = tuple(summary["base_shape"])
    sweep_steps = {
        "width": [r["steps"] for r in table if r["n_layers"] == base[1]],
        "depth": [r["steps"] for r in table if r["d_model"] == base[0]],
    }
    horizon = horizon_check(read_rows(hor_path), sweep_steps) if hor_path.exists() else None
    by_seed = seed_check(read_rows(seed_path(runs))) if seed_path(runs).exists() else None
    replay = replay_search(table, summary, seeds, n_trials)
    goals = {
        family: {
            par: {"width_drift_within_2x": summary[family][par]["width_drift"] <= 2.0,
                  "depth_drift_within_2x": summary[family][par]["depth_drift"] <= 2.0}
            for par in REPORTED if par in summary.get(family, {})
        }
        for family in FAMILIES if family in summary
    }  # fmt: skip
    result = {
        "machine": machine_info(),
        "runs_file": str(runs),
        "rows": len(table),
        "build_seconds_summed": sum(r["wall_time_s"] for r in table),
        "summary": summary,
        "goals": goals,
        "search_replay": replay,
        "iso_token_check": iso,
        "horizon_check": horizon,
        "horizon_rule_rows": RULE_ROWS_NOTE if rule_path.exists() else None,
        "seed_check": by_seed,
    }
    write_json(out, result)
    plot(rows, summary, replay, out.with_suffix(".png"))
    brief = {
        f: {
            p: {k: summary[f][p][k] for k in ("width_drift", "depth_drift", "max_loss_given_up_at_base_lr")}
            for p in summary[f]
        }
        for f in FAMILIES
        if f in summary
    }
    trials = {n: {s: e[s]["median_trials_to_95pct"] for s in REPLAY_SAMPLERS} for n, e in replay["strategies"].items()}
    print(json.dumps({"iso_token_check": iso, "horizon_check": horizon, "drift": brief,
                      "search_trials_to_95pct": trials}, indent=1))  # fmt: skip
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="train the table (appends to --runs, skipping rows it has)")
    b.add_argument("--runs", type=Path, default=Path("benchmarks/data/transfer_runs.csv"))
    b.add_argument("--smoke", action="store_true", help="tiny shapes, 2 rates, tiny budget: every path, no meaning")
    r = sub.add_parser("report", help="summary JSON, plot and search replay from the table")
    r.add_argument("--runs", type=Path, default=Path("benchmarks/data/transfer_runs.csv"))
    r.add_argument("--out", type=Path, default=Path("benchmarks/results/transfer.json"))
    args = parser.parse_args()
    if args.command == "build":
        build(args.runs, args.smoke)
    else:
        report(args.runs, args.out)


if __name__ == "__main__":
    main()
