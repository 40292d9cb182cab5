"""Does the best learning rate stay put across widths and depths? `standard` versus `completep`.

    python -m benchmarks.claims.transfer build  --runs benchmarks/data/transfer_runs.csv    # the three tables, hours
    python -m benchmarks.claims.transfer report --runs benchmarks/data/transfer_runs.csv \
        --out benchmarks/results/transfer.json
    python -m benchmarks.claims.transfer build --smoke --runs /tmp/t.csv    # every path, tiny (then `report`)

`build` trains (`workers.trial.run.run_trial`, shipped corpus, seed 0, 1 torch thread per job, 2 jobs at a time,
rows appended as they finish, a rerun skipping the rows it has) three tables:
- the sweep: every family under both parametrizations at every rate of `RATES` and every shape of a width sweep
  (d = 64, 128, 256 at L = 4) and a depth sweep (L = 2, 4, 8, 16 at d = 64), at one training budget (iso-FLOP: a
  smaller shape trains on more tokens, as in a search). `completep`'s base shape (64, 4) is the one both sweeps
  share, where both parametrizations are the same model;
- the horizon check (`<runs>_horizon.csv`): the base shape trained for `HORIZONS` steps, every family and rate,
  and NAG again with its gate and alpha rates uncapped: how fast each family's best rate moves with the horizon
  alone (lr* ~ steps^-beta);
- the horizon rule's check (`<runs>_horizon_rule.csv`): the sweep again under `completep` with `OptimConfig`'s
  horizon rule on, for every family whose beta (`rule_exponents`) is not 0.

`report` writes, per family and parametrization (the rule's rows as a third, `completep_horizon`), each shape's
best rate (a parabola in log lr through the three lowest points), the drift of the best rate across each sweep
(max / min; the goal: within 2x) and the losses at each shape's own best rate and at the base shape's; and each
family's beta. The iso-token check, the seed check and the search replayed on the table are retired: their
results are kept in results/transfer_checks.json, their tables in data/.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from benchmarks.harness import FAMILIES, append_runs, machine_info, pending, read_table, write_json

PARAMETRIZATIONS = ("standard", "completep")
RULE = "completep_horizon"  # the report's label for the horizon rule check's rows: completep + the horizon rule
REPORTED = (*PARAMETRIZATIONS, RULE)
RULE_ROWS_NOTE = (
    "completep_horizon: the rule's own runs for a family with beta != 0, evaluated on held-out windows spread "
    "over the text (the iso-FLOP table's runs predate that and read the first 128 windows, ~0.07 nats higher): "
    "compare its best rates and drifts, not its losses with the other parametrizations'"
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
    from workers.ladder.plans import plan_budget
    from workers.training.config import OptimConfig, RunConfig
    from workers.trial.run import run_trial

    torch.set_num_threads(1)
    family, parametrization, d_model, n_layers, lr, base, budget, *rest = job
    gate_lr, (horizon_tokens, beta, span) = job_extras(rest)
    cfg = arch(family, parametrization, d_model, n_layers, base)
    run = RunConfig(batch_size=BATCH, eval_sequences=128, evals=1)
    optim = OptimConfig(
        lr=lr, nag_gate_lr=gate_lr, horizon_tokens=horizon_tokens, horizon_exponents={family: beta}, horizon_span=span
    )
    result = run_trial(cfg, budget, load_corpus(DataConfig()), seed=0, run=run, optim=optim, width_probe=False)
    return {
        "family": family, "parametrization": parametrization, "d_model": d_model, "n_layers": n_layers,
        "lr": lr, "status": str(result.status),
        "val_loss": result.val_loss if result.val_loss is not None and math.isfinite(result.val_loss) else math.inf,
        "executed_flops_per_token": flops_per_token(cfg).executed, "tokens_seen": result.tokens_seen,
        "steps": result.tokens_seen // (BATCH * SEQ_LEN), "wall_time_s": round(result.wall_time_s, 2),
        "nag_gate_lr": gate_lr, "horizon_tokens": horizon_tokens or "", "horizon_exponent": beta,
        "lr_used": optim.at_horizon(family, plan_budget(cfg, budget, BATCH).tokens).lr, "seed": 0,
    }  # fmt: skip


def job_extras(rest: list) -> tuple[float, tuple]:
    """A job's optional tail (gate_lr, horizon) with its defaults: the NAG gate cap, and no horizon rule
    ((horizon_tokens, beta, span) for the rule's check)."""
    gate_lr = rest[0] if rest else NAG_GATE_LR
    return gate_lr, rest[1] if len(rest) > 1 and rest[1] else (None, 0.0, None)


def gate_lr_of(row: dict) -> float:
    return float(row.get("nag_gate_lr") or NAG_GATE_LR)


def job_key(row: dict) -> tuple:
    """A row's identity in its table: (family, parametrization, d, L, lr, NAG gate-rate cap)."""
    return (row["family"], row["parametrization"], int(row["d_model"]), int(row["n_layers"]), float(row["lr"]),
            gate_lr_of(row))  # fmt: skip


def horizon_key(row: dict) -> tuple:
    """`job_key` and the steps: the horizon check's table is the one holding a shape at several horizons."""
    return (*job_key(row), int(row["steps"]))


def build(path: Path, smoke: bool) -> None:
    """The sweep into `path`, then the horizon check and the horizon rule's check beside it."""
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
    run_jobs(horizon_jobs(base, SMOKE_HORIZONS if smoke else HORIZONS, rates), horizon_path(path), key=horizon_key)
    rule_jobs = horizon_rule_jobs(read_table(path), read_table(horizon_path(path)), rates, budget)
    run_jobs(rule_jobs, horizon_rule_path(path))


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


def run_jobs(jobs: list[tuple], path: Path, *, key=job_key) -> None:
    """Run the jobs missing from `path` (2 at a time), appending each row as it finishes. `key`: a row's identity
    in the table (`horizon_key` includes its steps, so every job's budget must buy whole batches exactly). A table
    keeps the columns it was started with."""
    rows = read_table(path) if path.exists() else []
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
    gate_lr, _ = job_extras(rest)
    steps = math.floor(budget / training_flops(arch(family, par, d, n, base), BATCH * SEQ_LEN))
    row = dict(family=family, parametrization=par, d_model=d, n_layers=n, lr=lr, steps=steps, nag_gate_lr=gate_lr)
    return key(row)


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


def plot(rows: list[dict], summary: dict, path: Path) -> None:
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


def report(runs: Path, out: Path) -> dict:
    table = read_table(runs)
    rows, rule_path = table, horizon_rule_path(runs)
    if rule_path.exists():  # the rule check's rows as a third parametrization (the rate column: the base rate)
        ruled = read_table(rule_path)
        families = {r["family"] for r in ruled}  # a family without rows has beta 0: its completep rows stand
        stand_in = [r for r in table if r["parametrization"] == "completep" and r["family"] not in families]
        rows = table + [dict(r, parametrization=RULE) for r in ruled + stand_in]
    summary = summarise(rows)
    hor_path = horizon_path(runs)
    base = tuple(summary["base_shape"])
    sweep_steps = {
        "width": [r["steps"] for r in table if r["n_layers"] == base[1]],
        "depth": [r["steps"] for r in table if r["d_model"] == base[0]],
    }
    horizon = horizon_check(read_table(hor_path), sweep_steps) if hor_path.exists() else None
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
        "horizon_check": horizon,
        "horizon_rule_rows": RULE_ROWS_NOTE if rule_path.exists() else None,
    }
    write_json(out, result)
    plot(rows, summary, out.with_suffix(".png"))
    drift = {f: {p: {k: v[k] for k in ("width_drift", "depth_drift")} for p, v in summary[f].items()} for f in goals}
    print(json.dumps({"horizon_check": horizon, "drift": drift}, indent=1))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="train the table (appends to --runs, skipping rows it has)")
    b.add_argument("--runs", type=Path, default=Path("benchmarks/data/transfer_runs.csv"))
    b.add_argument("--smoke", action="store_true", help="tiny shapes, 2 rates, tiny budget: every path, no meaning")
    r = sub.add_parser("report", help="summary JSON and plot from the tables")
    r.add_argument("--runs", type=Path, default=Path("benchmarks/data/transfer_runs.csv"))
    r.add_argument("--out", type=Path, default=Path("benchmarks/results/transfer.json"))
    args = parser.parse_args()
    if args.command == "build":
        build(args.runs, args.smoke)
    else:
        report(args.runs, args.out)


if __name__ == "__main__":
    main()
