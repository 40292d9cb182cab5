"""Ladder efficiency: the front at the target that a ladder, a single-budget or a target-budget search buys per FLOP.

    python -m benchmarks.trust.ladder_efficiency --runs benchmarks/data/fidelity_runs.csv \
        --replica-runs benchmarks/data/fidelity_replica_runs_keep_heads.csv \
        --out benchmarks/results/ladder_efficiency.json        # JSON + PNG beside it

Every search is replayed on the fidelity benchmark's tables (`benchmarks.trust.fidelity`), so its compute is counted,
not spent. A proposer gives configs one at a time: `random` (a permutation per seed, shared by every strategy)
or `tpe` (`harness.TableSampler` over (residual, n_layers, d_model), told the strategy's loss and the executed
FLOPs/token; a combination the table lacks is told FAIL and a repeat its earlier values, both free, which
flatters TPE). Each strategy pays for a proposed config and keeps a front:
- `ladder`, `replica`, `replica_without_noise_rule`: the search's own method (`grading.SearchReplay`, through its
  rung gate) on the budget ladder (4 rungs, eta 2; a run stopped at rung r costs C_r + cooldown x (C_0 + ... +
  C_{r-1})) or on the replica rungs at the default layout (each rung its own run; a rung measured again costs
  it once more), the last with the noise rule off (plain MO-ASHA); its front is its answer at T after each
  config. The front's repeats, which a search runs once at its end, are not replayed.
- `rung0`, `top_rung`, `target`: every config trained once at one budget (C0, the top rung, T: plain search at
  the target, one seed), costing that budget.
Scores (`Scorer`), after each proposal, of the front with each member at its true loss at T, over the true
front's: `hv_ratio` (reference loss ln 256), `hv_ratio_nadir` (reference loss the worst true loss, so the area
measures what the configs differ by), `regret` (nats). A strategy's state at total compute B is the one after
its last proposal costing <= B. Reported per (proposer, strategy) over seeds: each score at B = 0.1 .. 8 T, the
compute from which the ratio stays >= 95% to the end, and the final scores; the PNG plots the curves.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna

from benchmarks.harness import machine_info, read_table
from benchmarks.trust.fidelity import BEFORE_LAYOUT, layout_budgets
from benchmarks.trust.fidelity_tables import CORPORA, ETA, RUNS_CSV
from benchmarks.trust.grading import Truth, as_rows, graded_rows
from benchmarks.trust.replay import RandomProposer, SearchReplay, SingleBudget, TpeProposer, front, replay_proposals
from nas.answer.pareto import hypervolume
from workers.training.config import OptimConfig

log = logging.getLogger("ladder_efficiency")
# The replica strategy's ladder: promotion over replica rungs, replayed on the tables that hold every share (the
# replicas that kept the head count); a search's default layout has one rung and nothing to promote.
REPLICA_LAYOUT = BEFORE_LAYOUT
HERE = Path(__file__).resolve().parents[1]  # benchmarks/: its data/ and results/
ROOT = HERE.parent
PROPOSERS = ("random", "tpe")
STRATEGIES = ("ladder", "replica", "replica_without_noise_rule", "rung0", "top_rung", "target")
CHECKPOINTS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)  # total compute in units of T
GOAL = 0.95  # share of the true front's hypervolume
COOLDOWN = OptimConfig().cooldown  # the fidelity table was built with the default schedule


@dataclass(frozen=True)
class Table:
    """The seed-0 ladder runs of the fidelity table (rung losses) and the truth at T (mean over its seeds)."""

    flops: dict[int, float]  # executed forward FLOPs per token
    by_arch: dict[tuple[str, int, int], int]  # (residual, n_layers, d_model) -> config
    rung_loss: dict[int, tuple[float, ...]]  # loss at rung 0, 1, ...
    budgets: tuple[float, ...]  # training FLOPs of rung 0, 1, ...
    truth: dict[int, float]
    at_target: dict[int, float]  # seed 0's run at T: what a search at the target measures
    target: float
    ladder_compute: float  # median measured compute of a full ladder run (the cost model's check)
    ladder_rows: tuple[dict, ...] = ()  # every ladder run, both seeds (what `grading.SearchReplay` replays)
    replica_rows: tuple[dict, ...] | None = None  # every replica run (`fidelity.py build-replicas`), both seeds
    replica_budgets: tuple[float, ...] = ()  # the default layout's replica rungs

    @property
    def configs(self) -> list[int]:
        return sorted(self.truth)

    def rung_cost(self, rung: int) -> float:
        """A ladder run stopped after `rung`: the main run to C_rung plus the cooldown branches below it."""
        return self.budgets[rung] + COOLDOWN * sum(self.budgets[:rung])


def load(path: Path, replica_path: Path | None = None) -> Table:
    tables = [read_table(p) for p in (path, replica_path) if p is not None and p.exists()]
    rows, *rest = graded_rows(*tables)  # a config still being built is left out
    replica = rest[0] if rest else None
    ladder = [r for r in rows if r["kind"] == "ladder" and r["seed"] == 0]
    truth = {r["config"]: r for r in rows if r["kind"] == "truth" and r["seed"] == 0}
    budgets = tuple(sorted({r["budget_flops"] for r in ladder}))
    rung_loss = {c: [math.inf] * len(budgets) for c in truth}
    for r in ladder:
        rung_loss[r["config"]][r["rung"]] = r["val_loss"]
    if any(not math.isfinite(v) for losses in rung_loss.values() for v in losses):
        raise SystemExit(f"{path}: a config lacks a finite seed-0 loss at some rung")
    target = next(iter(truth.values()))["budget_flops"]
    return Table(
        flops={c: r["executed_flops_per_token"] for c, r in truth.items()},
        by_arch={(r["residual"], r["n_layers"], r["d_model"]): c for c, r in truth.items()},
        rung_loss={c: tuple(v) for c, v in rung_loss.items()},
        budgets=budgets,
        truth=Truth.of(rows).loss,
        at_target={c: r["val_loss"] for c, r in truth.items()},
        target=target,
        ladder_compute=float(np.median([r["compute_flops"] for r in ladder])),
        ladder_rows=tuple(r for r in rows if r["kind"] == "ladder"),
        replica_rows=tuple(replica) if replica is not None else None,
        replica_budgets=tuple(layout_budgets(target, *REPLICA_LAYOUT)) if replica is not None else (),
    )


# ---------------------------------------------------------------------------------------------
# strategies (`benchmarks.trust.replay`): propose(config) -> compute spent; estimates() -> what ranks the front


def make_strategy(name: str, table: Table) -> SearchReplay | SingleBudget:
    if name in ("ladder", "replica", "replica_without_noise_rule"):
        replica = name != "ladder"
        if replica and table.replica_rows is None:
            raise SystemExit("the replica strategy needs --replica-runs (fidelity.py build-replicas)")
        rows, budgets = (table.replica_rows, table.replica_budgets) if replica else (table.ladder_rows, table.budgets)
        eta = REPLICA_LAYOUT[1] if replica else ETA
        noise_rule = name != "replica_without_noise_rule"
        return SearchReplay(rows, budgets, eta, table.target, replica=replica, cooldown=COOLDOWN, noise_rule=noise_rule)
    if name == "rung0":
        return SingleBudget({c: v[0] for c, v in table.rung_loss.items()}, table.budgets[0])
    if name == "top_rung":
        return SingleBudget({c: v[-1] for c, v in table.rung_loss.items()}, table.budgets[-1])
    if name == "target":
        return SingleBudget(table.at_target, table.target)
    raise ValueError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")


# ---------------------------------------------------------------------------------------------
# one search: a proposer (`benchmarks.trust.replay`: random or TPE) asks, a strategy trains


def replay(table: Table, scorer: Scorer, proposer: str, strategy: str, seed: int, max_asks: int) -> dict:
    """One search (`benchmarks.trust.replay.replay_proposals`): after each proposal, the cumulative compute, the
    chosen front and its scores."""
    prop = RandomProposer(table, seed) if proposer == "random" else TpeProposer(table, seed, max_asks)
    strat = make_strategy(strategy, table)
    out = replay_proposals(prop, strat, table.flops)
    scores = [scorer(f) for f in out["fronts"]]
    out.update({m: [s[m] for s in scores] for m in Scorer.metrics})
    if isinstance(strat, SearchReplay):
        reached = strat.reached().values()
        out["configs_per_rung"] = [sum(k > r for k in reached) for r in range(len(strat.budgets))]
        strat.close()
    return out


# ---------------------------------------------------------------------------------------------
# scores of a chosen front, at the true losses


class Scorer:
    """Metrics of a chosen front, each member at its true loss at T.

    `hv_ratio`: its hypervolume over the true front's, reference (ln 256, 1.1 x max FLOPs/token).
    `hv_ratio_nadir`: the same with the reference loss at the table's worst true
    loss, so the loss axis spans what the configs differ by, not the distance to a uniform predictor.
    `regret`: the lowest true loss on the front minus the lowest of the table (nats; NaN when empty).
    """

    metrics = ("hv_ratio", "hv_ratio_nadir", "regret")

    def __init__(self, table: Table):
        self.truth, self.flops = table.truth, table.flops
        top = 1.1 * max(table.flops.values())
        self.refs = {"hv_ratio": (math.log(256), top), "hv_ratio_nadir": (max(table.truth.values()), top)}
        self.true_hv = {k: self._hv(list(table.truth), ref) for k, ref in self.refs.items()}

    def _hv(self, configs: list[int], ref: tuple[float, float]) -> float:
        return hypervolume(as_rows({c: self.truth[c] for c in configs}, self.flops), ref)

    def __call__(self, configs: list[int]) -> dict[str, float]:
        out = {k: self._hv(configs, ref) / self.true_hv[k] for k, ref in self.refs.items()}
        out["regret"] = min((self.truth[c] for c in configs), default=math.nan) - min(self.truth.values())
        return out


# ---------------------------------------------------------------------------------------------
# summary over seeds

EMPTY = {"hv_ratio": 0.0, "hv_ratio_nadir": 0.0, "regret": math.nan}  # before the first proposal


def at_compute(run: dict, metric: str, budget: float) -> float:
    """`metric` after the last proposal whose cumulative compute is <= budget (EMPTY before any)."""
    k = int(np.searchsorted(run["compute"], budget * (1 + 1e-12), side="right"))
    return run[metric][k - 1] if k else EMPTY[metric]


def compute_to(run: dict, metric: str, level: float) -> float | None:
    """Cumulative compute at the proposal from which `metric` stays >= `level` to the end, None if it ends below.

    Not the first time it reaches `level`: a front can lose a member when a later config, or a refit,
    makes it look dominated."""
    k = _kept_from(np.asarray(run[metric]) >= level)
    return None if k is None else run["compute"][k]


def _kept_from(ok: np.ndarray) -> int | None:
    """The first index from which every entry of `ok` is True; None if the last is False."""
    if not len(ok) or not ok[-1]:
        return None
    return int(len(ok) - np.argmin(ok[::-1])) if not ok.all() else 0


def _stats(values: list[float]) -> dict:
    v = np.array(values, dtype=float)
    if np.isnan(v).all():
        return {"mean": None, "std": None, "seeds": 0}
    return {"mean": float(np.nanmean(v)), "std": float(np.nanstd(v)), "seeds": int((~np.isnan(v)).sum())}


def _rounded(values: np.ndarray) -> list[float | None]:
    """For the JSON: 4 decimals, NaN (no seed has a front yet) as null."""
    return [None if math.isnan(v) else round(float(v), 4) for v in values]


def summarise(runs: list[dict], target: float, grid: np.ndarray) -> dict:
    out: dict = {"curves": {}}
    for metric in Scorer.metrics:
        out[f"{metric}_at_compute"] = {
            f"{m:g}T": _stats([at_compute(r, metric, m * target) for r in runs]) for m in CHECKPOINTS
        }
        curves = np.array([[at_compute(r, metric, b) for b in grid] for r in runs])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # regret: no seed has a front yet
            out["curves"][metric] = {
                "mean": _rounded(np.nanmean(curves, axis=0)),
                "std": _rounded(np.nanstd(curves, axis=0)),
            }
    for metric in ("hv_ratio", "hv_ratio_nadir"):
        reach = [compute_to(r, metric, GOAL) for r in runs]
        hit = [x / target for x in reach if x is not None]
        kept = _kept_from(np.array(out["curves"][metric]["mean"]) >= GOAL)
        out[f"{metric}_compute_to_{GOAL:g}_T"] = {
            "seeds_holding": len(hit),
            "median_of_holding_seeds": float(np.median(hit)) if hit else None,
            "mean_curve_holds_from": None if kept is None else float(grid[kept] / target),
            "per_seed": [None if x is None else x / target for x in reach],
        }
    out["final"] = {
        **{f"{m}_mean": float(np.mean([r[m][-1] for r in runs])) for m in Scorer.metrics},
        "compute_T_mean": float(np.mean([r["compute"][-1] for r in runs]) / target),
        "configs_proposed_mean": float(np.mean([len(r["compute"]) for r in runs])),
        "front_size_mean": float(np.mean([len(r["fronts"][-1]) for r in runs])),
        "asks_mean": float(np.mean([r["asks"] for r in runs])),
        "repeats_mean": float(np.mean([r["repeats"] for r in runs])),
    }
    if "configs_per_rung" in runs[0]:
        out["final"]["configs_per_rung_mean"] = np.mean([r["configs_per_rung"] for r in runs], axis=0).tolist()
    return out


def table_facts(table: Table, scorer: Scorer) -> dict:
    return {
        "configs": len(table.truth),
        "target_flops": table.target,
        "rung_flops": list(table.budgets),
        "rung_cost_flops": [table.rung_cost(r) for r in range(len(table.budgets))],
        "rung_cost_rule": f"C_r + {COOLDOWN:g} x (C_0 + ... + C_(r-1)): the main run plus the cooldown branches below",
        "full_ladder_cost_over_measured": table.rung_cost(len(table.budgets) - 1) / table.ladder_compute,
        "replica_rung_flops": list(table.replica_budgets),
        "replica_rung_cost_rule": "C_0 + ... + C_r: each replica rung its own run",
        "reference_points": {k: {"val_loss": r[0], "executed_flops_per_token": r[1]} for k, r in scorer.refs.items()},
        "true_front": front(table.truth, table.flops),
        "true_loss_range": [min(table.truth.values()), max(table.truth.values())],
    }


LABELS = {
    "hv_ratio": "HV / true front's HV, ref loss ln 256",
    "hv_ratio_nadir": "HV / true front's HV, ref loss = worst true loss",
    "regret": "best true loss on the front - best in table (nats)",
}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.array(result["compute_grid_T"])
    proposers = list(result["strategies"])
    fig, axes = plt.subplots(3, len(proposers), figsize=(7 * len(proposers), 12), sharex=True, squeeze=False)
    for col, proposer in enumerate(proposers):
        for row, metric in enumerate(Scorer.metrics):
            ax = axes[row, col]
            for strategy, summary in result["strategies"][proposer].items():
                curve = summary["curves"][metric]
                mean, std = (np.array(curve[k], dtype=float) for k in ("mean", "std"))
                (line,) = ax.plot(grid, mean, label=strategy, drawstyle="steps-post")
                ax.fill_between(grid, mean - std, mean + std, color=line.get_color(), alpha=0.12, step="post")
                final = summary["final"]  # the table exhausted: flat from here on
                ax.plot(final["compute_T_mean"], final[f"{metric}_mean"], "o", color=line.get_color())
            if metric != "regret":
                ax.axhline(GOAL, color="k", ls="--", lw=1)
                ax.set_ylim(0, 1.02)
            ax.set(xscale="log", ylabel=LABELS[metric])
            ax.set_title(f"{proposer} proposer, mean +-1 std over {result['seeds']} seeds", fontsize=10)
            ax.legend(loc="lower right" if metric != "regret" else "upper right", fontsize=8)
        axes[-1, col].set_xlabel("total training compute / T (T: one config trained at the target)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(
    path: Path, out: Path, seeds: int, proposers: list[str], max_asks: int, replica_path: Path | None = None
) -> dict:
    start, table = time.perf_counter(), load(path, replica_path)
    scorer = Scorer(table)
    grid = table.target * np.geomspace(0.01, 1.5 * len(table.truth), 150)
    strategies: dict = {}
    for proposer in proposers:
        strategies[proposer] = {}
        for strategy in (s for s in STRATEGIES if not s.startswith("replica") or table.replica_rows is not None):
            runs = [replay(table, scorer, proposer, strategy, s, max_asks) for s in range(seeds)]
            strategies[proposer][strategy] = summarise(runs, table.target, grid)
            log.info("%s / %s: final %s", proposer, strategy, strategies[proposer][strategy]["final"])
    result = {
        "summary": {p: {s: _brief(d) for s, d in st.items()} for p, st in strategies.items()},
        "table": table_facts(table, scorer),
        "machine": machine_info(),
        "runs_csv": str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path),
        "seeds": seeds,
        "max_asks": max_asks,
        "goal_hv_ratio": GOAL,
        "replay_wall_s": time.perf_counter() - start,
        "compute_grid_T": [float(f"{x:.4g}") for x in grid / table.target],
        "strategies": strategies,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(_dumps(result))
    plot(result, out.with_suffix(".png"))
    return result


def _dumps(result: dict) -> str:
    """Indented JSON with every list of numbers on one line (the curves would take a line per value)."""
    text = json.dumps(result, indent=2)
    return re.sub(r"\[([-+0-9.eE,\snul]+)\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text) + "\n"


def _brief(summary: dict) -> dict:
    """Means at the checkpoints and compute to the goal: the numbers to read first."""
    out = {m: {k: v["mean"] for k, v in summary[f"{m}_at_compute"].items()} for m in Scorer.metrics}
    for m in ("hv_ratio", "hv_ratio_nadir"):
        reach = summary[f"{m}_compute_to_{GOAL:g}_T"]
        out[f"{m}_compute_to_{GOAL:g}_T"] = {k: reach[k] for k in ("median_of_holding_seeds", "seeds_holding")}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, default=RUNS_CSV)
    parser.add_argument("--replica-runs", type=Path, default=CORPORA["plays"].keep_heads_runs, help="replica rows")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "ladder_efficiency.json")
    parser.add_argument("--seeds", type=int, default=10, help="proposal orders 0..N-1 per proposer")
    parser.add_argument("--proposers", default=",".join(PROPOSERS), help="comma-separated: random, tpe")
    parser.add_argument("--max-asks", type=int, default=240, help="TPE asks per search (repeats and gaps count)")
    args = parser.parse_args(argv)
    proposers = args.proposers.split(",")
    if unknown := set(proposers) - set(PROPOSERS):
        parser.error(f"--proposers: unknown {sorted(unknown)}; choose from {', '.join(PROPOSERS)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    result = run(args.runs, args.out, args.seeds, proposers, args.max_asks, args.replica_runs)
    print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
