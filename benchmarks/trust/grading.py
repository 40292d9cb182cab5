"""Grading an answer at the target against the configs trained for real there: what `benchmarks.trust.fidelity`,
`benchmarks.trust.replay` and `benchmarks.trust.ladder_efficiency` share. Tables are
read with `benchmarks.harness.read_table`.

Replaying a search on a table is `benchmarks.trust.replay` (it grades with this module). Here:
- `graded_rows`: the configs every table holds in full; a config still being built is left out of the grading.

Grading:
- `Truth`: each config's loss at T (the mean of its seeds), the truth's seed noise, its compute and size, and the
  noise ceiling of a ranking against it (`tau_ceiling`).
- `grade`: Kendall tau-b against the truth, regret (nats and truth seed-noise units), whether the true best is
  in the predicted top 3, the hypervolume of the predicted front scored at true losses over the true front's,
  and the coverage of the bands: a new figure of a ranking belongs there.
- `baselines`: rankings from the table without a search (each rung alone, every rung of every config, the
  parameter count), each graded by `grade`: a new ranking without a search belongs there.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from nas.answer.calibration import calibrate, coverage
from nas.answer.decisions import kendall
from nas.answer.extrapolate import RungPoint, budget_key, seed_noise
from nas.answer.pareto import FrontPoint, hypervolume, pareto_rows
from nas.answer.target import Answer, answer_at_target
from nas.store import RungRow

__all__ = [
    "BAND_GAMMAS",
    "ORDERS",
    "Truth",
    "as_rows",
    "bands_of",
    "bands_with",
    "baselines",
    "front_of",
    "grade",
    "graded_rows",
    "hv_ratio",
    "losses_at",
    "rung_rows",
    "tau",
]

ORDERS = 5  # arrival orders each search is replayed in: the table's, and 4 random permutations
BAND_GAMMAS = (1.0, 0.75, 0.5)  # conformity scalings whose coverage is measured (`nas.answer.calibration.GAMMA`)


def graded_rows(*tables: Sequence[dict]) -> list[list[dict]]:
    """Each table's rows of the configs that every table holds in full: a config has a row at every (kind, seed,
    budget) that some config of that table has. A table being built (rows appended job by job) may hold part of a
    config's runs, or none of its truth; such a config is left out of the grading until its rows are all there."""
    full: set[int] | None = None
    for rows in tables:
        have: dict[int, set] = defaultdict(set)
        for r in rows:
            have[r["config"]].add((r["kind"], r["seed"], budget_key(r["budget_flops"])))
        grid = set().union(*have.values())
        complete = {c for c, keys in have.items() if keys == grid}
        full = complete if full is None else full & complete
    return [[r for r in rows if r["config"] in (full or set())] for rows in tables]


tau = kendall  # Kendall tau-b over the configs both rankings have (`nas.answer.decisions.kendall`)


@dataclass(frozen=True)
class Truth:
    """The configs trained for real at the target: each config's seed losses, and what follows from them."""

    target: float
    runs: dict[int, list[float]]  # config -> its loss at T, one per seed
    flops: dict[int, float]  # config -> executed forward FLOPs per token
    params: dict[int, int]  # config -> parameters
    compute: float  # training FLOPs of one seed of every config at T

    @classmethod
    def of(cls, rows: Sequence[dict]) -> Truth:
        truth = [r for r in rows if r["kind"] == "truth"]
        runs: dict[int, list[float]] = {}
        for r in truth:
            runs.setdefault(r["config"], []).append(r["val_loss"])
        return cls(
            target=truth[0]["budget_flops"],
            runs=runs,
            flops={r["config"]: r["executed_flops_per_token"] for r in truth},
            params={r["config"]: r["params"] for r in truth},
            compute=sum(r["compute_flops"] for r in truth if r["seed"] == 0),
        )

    @property
    def loss(self) -> dict[int, float]:
        return {c: float(np.mean(v)) for c, v in self.runs.items()}

    @property
    def noise(self) -> float | None:
        """The seed-to-seed spread of one run at T (pooled)."""
        return seed_noise([RungPoint(c, "-", self.target, x, s) for c, v in self.runs.items() for s, x in enumerate(v)])

    def tau_ceiling(self, seeds: int | None = None) -> float | None:
        """The Kendall tau a perfect predictor of each config's expected loss reaches against this truth (the mean of
        `seeds` runs per config, all by default). With seed noise s, n seeds and spread sd of the seed means, the
        share of the truth's variance that is signal is r = 1 - s^2 / (n sd^2); for Gaussian scores the
        correlation of the expected loss with the truth is sqrt(r), and tau = (2 / pi) arcsin(correlation)
        (Greiner's relation)."""
        noise = self.noise
        spread = float(np.std(list(self.loss.values()), ddof=1))
        if noise is None or spread == 0.0:
            return None
        n = seeds or float(np.mean([len(v) for v in self.runs.values()]))
        return 2.0 / math.pi * math.asin(math.sqrt(max(0.0, 1.0 - noise**2 / (n * spread**2))))


def as_rows(losses: Mapping[int, float], flops: Mapping[int, float]) -> list[FrontPoint]:
    return [FrontPoint(number=c, val_loss=loss, executed_flops_per_token=flops[c]) for c, loss in losses.items()]


def front_of(losses: Mapping[int, float], flops: Mapping[int, float]) -> set[int]:
    """The configs non-dominated by (loss, executed FLOPs per token)."""
    return {r.number for r in pareto_rows(as_rows(losses, flops))}


def hv_ratio(predicted: Mapping[int, float], truth: Truth) -> float:
    """Hypervolume of the predicted front, each member at its TRUE loss, over the true front's, with the reference
    loss at the worst true loss (against ln V the cheapest config alone would hold nearly all the area)."""
    true = truth.loss
    ref = (max(true.values()), 1.1 * max(truth.flops.values()))
    chosen = front_of({c: predicted[c] for c in true if c in predicted}, truth.flops)
    scored = [r for r in as_rows(true, truth.flops) if r.number in chosen]
    return hypervolume(scored, ref) / hypervolume(as_rows(true, truth.flops), ref)


def grade(
    predicted: Mapping[int, float], truth: Truth, bands: Mapping[int, tuple[float, float] | None] | None = None
) -> dict:
    """How good a ranking at T is (module docstring); with `bands`, how often they hold the truth."""
    true = truth.loss
    best = min(true, key=true.get)
    ranked = sorted((c for c in true if c in predicted), key=predicted.get)
    regret = true[ranked[0]] - true[best]
    out = {
        "kendall_tau": tau(predicted, true),
        "regret_nats": regret,
        "regret_in_seed_noise": regret / truth.noise if truth.noise else None,
        "true_best_in_predicted_top3": best in ranked[:3],
        "hypervolume_ratio_nadir": hv_ratio(predicted, truth),
    }
    if bands is not None:
        out["band_coverage"] = coverage(bands, true)
        out["band_coverage_single_runs"] = (
            float(
                np.mean(
                    [lo <= x <= hi for c, b in bands.items() if b is not None for lo, hi in [b] for x in truth.runs[c]]
                )
            )
            if any(b is not None for b in bands.values())
            else None
        )
        out["bands"] = sum(b is not None for b in bands.values())
    return out


def bands_with(answer: Answer, target: float, gamma: float) -> dict[int, tuple[float, float] | None]:
    """The answer's bands calibrated again with the conformity scaling d^`gamma` (`nas.answer.calibration`)."""
    chosen = answer.backtest.chosen
    calibration = calibrate(
        [(h.error(chosen), h.from_flops, h.to_flops) for h in answer.backtest.held_out], gamma=gamma
    )
    return {
        n: calibration.band(p.loss, answer.highest[n], target) if n in answer.highest else None
        for n, p in answer.predictions.items()
    }


def bands_of(answer: Answer) -> dict[int, tuple[float, float] | None]:
    """The answer's band at T of each trial (None where it has none)."""
    return {n: (p.low, p.high) if p.low is not None else None for n, p in answer.predictions.items()}


def losses_at(rows: Sequence[dict], budget: float, seed: int = 0) -> dict[int, float]:
    """Each config's loss at one budget of the table, one seed: a ranking from one rung alone."""
    return {
        r["config"]: r["val_loss"]
        for r in rows
        if r["seed"] == seed and budget_key(r["budget_flops"]) == budget_key(budget)
    }


def rung_rows(rows: Sequence[dict], budgets: Sequence[float], seeds: Sequence[int]) -> list[RungRow]:
    """The table's runs at `budgets` and `seeds` as the store's rung rows (trial number = config): every rung of
    every config, as if a search had measured them all."""
    keys = {budget_key(b): r for r, b in enumerate(sorted(budgets))}
    out = []
    for x in rows:
        rung = keys.get(budget_key(x["budget_flops"]))
        if rung is None or x["seed"] not in seeds:
            continue
        out.append(
            RungRow(
                number=x["config"], rung=rung, seed=x["seed"], budget_flops=x["budget_flops"], steps=1,
                tokens=x["tokens"], val_loss=x["val_loss"], training_flops=x["compute_flops"], train_seconds=None,
                d_model=x.get("replica_d_model"), params=x.get("replica_params"),
                tokens_per_param=x.get("tokens_per_param"), target_tokens_per_param=x.get("target_tokens_per_param"),
                on_path=x.get("on_path"), residual=x["residual"],
                executed_flops_per_token=x["executed_flops_per_token"],
            )
        )  # fmt: skip
    return sorted(out, key=lambda r: (r.number, r.rung, r.seed))


def baselines(rows, truth: Truth, budgets) -> dict:
    """Rankings from the table without a search, graded: each rung alone (seed 0), the answer from every rung of
    every config (seed 0; both seeds), and the parameter count (bigger better)."""
    out = {
        f"rung {r} alone (T/{truth.target / b:.0f}, seed 0)": grade(losses_at(rows, b), truth)
        for r, b in enumerate(budgets)
    }
    for label, seeds in (
        ("every rung of every config, seed 0", (0,)),
        ("every rung of every config, both seeds", (0, 1)),
    ):
        answer = answer_at_target(rung_rows(rows, budgets, seeds), truth.target)
        out[f"answer, {label}"] = grade({n: p.loss for n, p in answer.predictions.items()}, truth, bands_of(answer)) | {
            "predictor": answer.backtest.chosen
        }
    out["parameter count (bigger better)"] = grade({c: -float(n) for c, n in truth.params.items()}, truth)
    return out
