"""Search efficiency: hypervolume reached by the default sampler (TPE) vs random search, same trials.

Both samplers search a FIXED table of real proxy results, replayed so a replay costs nothing:

    python -m benchmarks.trust.search_efficiency build     # real proxy trials -> benchmarks/data/proxy_grid.csv
    python -m benchmarks.trust.search_efficiency replay --out benchmarks/results/search_efficiency.json

`build` runs one `workers.trial.run.run_trial` per grid point, in-process and one after another:
residual {cascaded, nag, ancre} x n_layers {2, 4} x d_model {64, 128} x mod_rate {0, 0.25} x
lr {1e-3, 4e-3} (48 configs; vocab 256, seq 128, 4 heads, mod_every 1, `RunConfig()` defaults,
seed 0, no width probe, 1 torch thread) at 1e11 training FLOPs each. One thread because the
machine is shared: next to another busy process, torch's 2 threads ran the 2-layer d64 trial in
112 s instead of 5.5 s (spin-waiting threads); only wall_time_s depends on it.

`replay` (the default) runs, for seeds 0..9, an Optuna study with both objectives minimised
(val_loss, executed FLOPs/token) whose objective samples the five knobs with `suggest_categorical`
over the grid values and looks the result up in the CSV, for 30 trials, once with
`nas.search.study.make_sampler("tpe", seed)` and once with `make_sampler("random", seed)`. After each
trial it computes the hypervolume of the completed points so far with `nas.answer.pareto` (moocore,
points beyond the reference count for nothing), reference = (ln 256, 1.1 x the grid's largest
executed FLOPs/token), and compares with the hypervolume of the whole grid (the best reachable).
Writes mean and std per trial for both samplers, the final mean as a share of the grid's HV, the
first trial at which each mean reaches 90% (and 99%) of it, and a PNG of the curves. TPE draws
its first `n_startup_trials` (10) trials from a RandomSampler with the same seed, so both
samplers' curves coincide up to there; the JSON says through which trial they do.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import logging
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import optuna

from benchmarks.harness import machine_info, read_table, write_json
from benchmarks.trust.replay import sample_table
from nas.answer.pareto import FrontPoint, hypervolume, hypervolume_curve, reference_point

log = logging.getLogger("search_efficiency")
HERE = Path(__file__).resolve().parents[1]  # benchmarks/: its data/ and results/
ROOT = HERE.parent
GRID_CSV = HERE / "data" / "proxy_grid.csv"
GRID = {
    "residual": ["cascaded", "nag", "ancre"],
    "n_layers": [2, 4],
    "d_model": [64, 128],
    "mod_rate": [0.0, 0.25],
    "lr": [1e-3, 4e-3],
}
FIXED_ARCH = dict(vocab_size=256, seq_len=128, n_heads=4, mod_every=1)
BUDGET_FLOPS = 1e11
COLUMNS = [*GRID, "status", "val_loss", "executed_flops_per_token", "tokens_seen", "wall_time_s"]
SAMPLERS = ("tpe", "random")


# ---------------------------------------------------------------------------------------------
# build


def grid_points() -> list[dict]:
    return [dict(zip(GRID, values, strict=False)) for values in itertools.product(*GRID.values())]


def run_point(knobs: dict, corpus, seed: int) -> dict:
    """One real proxy trial of a grid point, as a CSV row."""
    from search_spaces.residual_lm import ArchConfig
    from workers.training.config import OptimConfig, RunConfig
    from workers.trial.run import run_trial

    arch = {k: v for k, v in knobs.items() if k != "lr"}
    cfg = ArchConfig(**FIXED_ARCH, **arch)
    result = run_trial(
        cfg, BUDGET_FLOPS, corpus, seed=seed, optim=OptimConfig(lr=knobs["lr"]), run=RunConfig(), width_probe=False
    )
    return {
        **knobs,
        "status": result.status,
        "val_loss": result.val_loss,
        "executed_flops_per_token": result.executed_flops_per_token,
        "tokens_seen": result.tokens_seen,
        "wall_time_s": round(result.wall_time_s, 3),
    }


def build(out: Path, seed: int, threads: int) -> None:
    import torch

    from workers.data.config import DataConfig
    from workers.data.corpus import load_corpus

    torch.set_num_threads(threads)
    corpus = load_corpus(DataConfig())
    points, rows, start = grid_points(), [], time.perf_counter()
    for i, knobs in enumerate(points):
        rows.append(run_point(knobs, corpus, seed))
        r = rows[-1]
        log.info(
            "%d/%d %s: %s val_loss=%.4f F=%.3g tokens=%d %.1fs",
            i + 1,
            len(points),
            knobs,
            r["status"],
            r["val_loss"],
            r["executed_flops_per_token"],
            r["tokens_seen"],
            r["wall_time_s"],
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    log.info("wrote %s: %d configs in %.0f s", out, len(rows), time.perf_counter() - start)


# ---------------------------------------------------------------------------------------------
# replay


@dataclass(frozen=True)
class GridPoint(FrontPoint):
    """A grid point's proxy trial as `nas.answer.pareto` reads it (`number`: its row in the CSV), with its knobs."""

    knobs: dict = field(default_factory=dict)


def load_grid(path: Path) -> dict[tuple, GridPoint]:
    """The CSV as rows with the attributes `nas.answer.pareto` reads, keyed by the five knob values."""
    table = {}
    for number, row in enumerate(read_table(path)):
        key = tuple(row[k] for k in GRID)
        table[key] = GridPoint(
            number=number,
            status=row["status"],
            val_loss=row["val_loss"],
            executed_flops_per_token=row["executed_flops_per_token"],
            knobs=dict(zip(GRID, key, strict=True)),
        )
    missing = [p for p in grid_points() if tuple(p.values()) not in table]
    if missing:
        raise SystemExit(f"{path}: {len(missing)} grid points missing (first: {missing[0]}); run `build` first")
    return table


def replay(table: dict, sampler: str, seed: int, n_trials: int) -> list:
    """One study of `n_trials` over the table (`benchmarks.trust.replay.sample_table`); the looked-up rows in trial
    order."""
    return sample_table(GRID, lambda knobs: table[tuple(knobs[k] for k in GRID)], sampler, seed, n_trials)


def first_reaching(curve: np.ndarray, level: float) -> int | None:
    """1-based trial index at which `curve` first reaches `level`, or None."""
    hits = np.nonzero(curve >= level)[0]
    return int(hits[0]) + 1 if len(hits) else None


def run_replays(table: dict, seeds: list[int], n_trials: int, ref: tuple) -> dict:
    """Per sampler: HV curve of every seed, plus how many distinct configs each seed visited."""
    out = {}
    for name in SAMPLERS:
        curves, distinct = [], []
        for seed in seeds:
            rows = replay(table, name, seed, n_trials)
            curves.append(hypervolume_curve(rows, ref))
            distinct.append(len({id(r) for r in rows}))
        out[name] = {"curves": curves, "distinct_configs": distinct}
        log.info("%s: final HV per seed %s", name, [round(c[-1], 1) for c in curves])
    return out


def summarise(runs: dict, grid_hv: float) -> dict:
    summary = {}
    for name, run in runs.items():
        curves = np.array(run["curves"])
        mean, std = curves.mean(axis=0), curves.std(axis=0)
        summary[name] = {
            "mean_hv": mean.tolist(),
            "std_hv": std.tolist(),
            "final_mean_share_of_grid_hv": float(mean[-1] / grid_hv),
            "final_share_per_seed": (curves[:, -1] / grid_hv).tolist(),
            "trials_to_90pct_of_grid_hv": first_reaching(mean, 0.9 * grid_hv),
            "trials_to_99pct_of_grid_hv": first_reaching(mean, 0.99 * grid_hv),
            "seeds_reaching_grid_hv": int(np.sum(curves[:, -1] >= grid_hv * (1 - 1e-12))),
            "mean_distinct_configs": float(np.mean(run["distinct_configs"])),
        }
    return summary


def shared_prefix(runs: dict) -> int:
    """Trials over which TPE's curves equal random's for every seed (TPE starts with random trials)."""
    a, b = np.array(runs["tpe"]["curves"]), np.array(runs["random"]["curves"])
    same = np.all(a == b, axis=0)
    return int(np.argmin(same)) if not same.all() else len(same)


def grid_facts(table: dict, ref: tuple) -> dict:
    rows = list(table.values())
    from nas.answer.pareto import pareto_rows

    front = pareto_rows(rows)
    return {
        "configs": len(rows),
        "completed": sum(r.status == "completed" for r in rows),
        "hypervolume": hypervolume(rows, ref),
        "pareto_front": [
            {**r.knobs, "val_loss": r.val_loss, "executed_flops_per_token": r.executed_flops_per_token} for r in front
        ],
    }


def plot(summary: dict, grid_hv: float, ref: tuple, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, colour in zip(SAMPLERS, ("tab:blue", "tab:orange"), strict=False):
        mean, std = np.array(summary[name]["mean_hv"]), np.array(summary[name]["std_hv"])
        x = np.arange(1, len(mean) + 1)
        ax.plot(x, mean, color=colour, label=f"{name} (mean of seeds)")
        ax.fill_between(x, mean - std, mean + std, color=colour, alpha=0.2)
    ax.axhline(grid_hv, color="black", linestyle="--", label="whole grid (best reachable)")
    ax.axvline(10.5, color="grey", linestyle=":", label="end of TPE's 10 random start-up trials")
    ax.set_xlabel("trial")
    ax.set_ylabel("hypervolume")
    ax.set_title(f"HV of (val_loss, exec FLOPs/token), ref = (ln 256, {ref[1]:.3g}); ±1 std")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def repo_path(path: Path) -> str:
    """`path` relative to the repository root (POSIX form) when it lies inside it, else absolute.

    What the JSON records then reads the same on every machine and checkout.
    """
    path = Path(path).resolve()
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def replay_main(args) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    table = load_grid(args.grid)
    ref = reference_point(list(table.values()), vocab_size=FIXED_ARCH["vocab_size"])
    facts = grid_facts(table, ref)
    start = time.perf_counter()
    runs = run_replays(table, list(range(args.seeds)), args.trials, ref)
    summary = summarise(runs, facts["hypervolume"])
    summary["tpe"]["identical_to_random_through_trial"] = shared_prefix(runs)
    out = {
        "machine": machine_info(),
        "grid_csv": repo_path(args.grid),
        "grid_knobs": GRID,
        "fixed_arch": FIXED_ARCH,
        "budget_flops_per_trial": BUDGET_FLOPS,
        "trials": args.trials,
        "seeds": list(range(args.seeds)),
        "samplers": {"tpe": "TPESampler(multivariate=True, seed)", "random": "RandomSampler(seed)"},
        "reference_point": {
            "val_loss": ref[0],
            "executed_flops_per_token": ref[1],
            "rule": "(ln 256, 1.1 x max executed FLOPs/token in the grid)",
        },
        "grid": facts,
        "summary": summary,
        "per_seed_curves": {k: v["curves"] for k, v in runs.items()},
        "replay_wall_s": time.perf_counter() - start,
    }
    write_json(args.out, out)
    plot(summary, facts["hypervolume"], ref, args.out.with_suffix(".png"))
    log.info(
        "grid HV %.4g; final share: %s; trials to 90%%: %s",
        facts["hypervolume"],
        {k: round(v["final_mean_share_of_grid_hv"], 3) for k, v in summary.items()},
        {k: v["trials_to_90pct_of_grid_hv"] for k, v in summary.items()},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command")
    b = sub.add_parser("build", help="run the grid of real proxy trials and write the CSV")
    b.add_argument("--grid", type=Path, default=GRID_CSV)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1: beside other busy processes 2 threads ran a trial 20x slower here)",
    )
    r = sub.add_parser("replay", help="replay TPE and random search over the CSV (the default)")
    r.add_argument("--grid", type=Path, default=GRID_CSV)
    r.add_argument("--out", type=Path, default=Path("benchmarks/results/search_efficiency.json"))
    r.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1")
    r.add_argument("--trials", type=int, default=30)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.command == "build":
        build(args.grid, args.seed, args.threads)
    else:
        if args.command is None:
            args = r.parse_args([])
        replay_main(args)


if __name__ == "__main__":
    main()
