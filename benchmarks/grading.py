"""Grading a search's answer at the target against configs trained for real there: the shared parts of
`benchmarks.fidelity` and `benchmarks.ladder_efficiency`.

- `read_runs`: a table of real runs (`benchmarks.fidelity build`), typed.
- `Truth`: each config's loss at T (the mean of its seeds), the truth's seed noise, its compute and the noise
  ceiling of a ranking against it (`tau_ceiling`).
- `SearchReplay`: a search replayed on a table, through the search's own rung decider
  (`nas.search.rung_gate.StoreRungGate`) on a real SQLite store: configs arrive in a given order, each climbs the rungs
  the decider promotes it to, measures a rung again where the decider asks (the table's second seed), and at
  the end the front's members get their second seed (`nas search --repeat-seeds 1`). What it paid for is
  counted; what it answers is `nas.answer.target.answer_at_target` over what it stored.
- `grade`: Kendall tau-b against the truth, regret (nats and truth seed-noise units), whether the true best is
  in the predicted top 3, the hypervolume of the predicted front scored at true losses over the true front's,
  and the coverage of the bands.
"""

from __future__ import annotations

import csv
import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.stats import kendalltau

from nas.answer.calibration import calibrate, coverage
from nas.answer.extrapolate import RungPoint, budget_key, seed_noise
from nas.answer.pareto import FrontPoint, hypervolume, pareto_rows
from nas.answer.rung_decision import REMEASURE_SEED_OFFSET, Ladder
from nas.answer.target import Answer, answer_at_target, front_at_target
from nas.search.rung_gate import StoreRungGate
from nas.store import Store
from workers.status import TrialStatus

__all__ = [
    "SearchReplay",
    "Truth",
    "as_rows",
    "bands_with",
    "front_of",
    "grade",
    "hv_ratio",
    "read_runs",
    "tau",
]

_INTS = ("config", "n_layers", "d_model", "params", "seed", "rung", "tokens", "replica_d_model", "replica_params")
_FLOATS = (
    "mod_rate",
    "executed_flops_per_token",
    "budget_flops",
    "val_loss",
    "compute_flops",
    "wall_time_s",
    "tokens_per_param",
    "target_tokens_per_param",
)


def read_runs(path: Path) -> list[dict]:
    """The rows of a table of runs, with numbers as numbers."""
    with path.open() as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in _INTS:
            if k in r:
                r[k] = int(r[k])
        for k in _FLOATS:
            if k in r:
                r[k] = float(r[k])
        if "on_path" in r:
            r["on_path"] = r["on_path"] == "True"
    return rows


def tau(a: Mapping[int, float], b: Mapping[int, float]) -> float | None:
    """Kendall tau-b over the keys both have (None below 3 of them: not a ranking)."""
    keys = sorted(set(a) & set(b))
    if len(keys) < 3:
        return None
    value = float(kendalltau([a[k] for k in keys], [b[k] for k in keys]).statistic)
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class Truth:
    """The configs trained for real at the target: each config's seed losses, and what follows from them."""

    target: float
    runs: dict[int, list[float]]  # config -> its loss at T, one per seed
    flops: dict[int, float]  # config -> executed forward FLOPs per token
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


@dataclass
class SearchReplay:
    """A search replayed on a table of runs (module docstring).

    `rows`: the table's rung rows (replica rows, or budget-ladder rows); `budgets`: the rung budgets of the
    ladder replayed, lowest first; `eta`: its promotion ratio; `replica`: replica rungs (each its own run, so a
    rung can be measured again) or a budget ladder (one run: stopping at rung r costs C_r plus the cooldown
    branches below, `cooldown` x each)."""

    rows: Sequence[dict]
    budgets: Sequence[float]
    eta: float
    target: float
    replica: bool = True
    cooldown: float = 0.2
    noise_rule: bool = True  # `Ladder.noise_rule`: off replays plain MO-ASHA
    spent: float = 0.0
    arrivals: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="resnas-replay-")
        self.store = Store(f"sqlite:///{self._dir.name}/replay.db")
        self.store.create_search(
            "replay", requested_trials=1, budget={}, space={}, settings={}, optuna_study_name=None, code_version=None
        )
        ladder = Ladder(self.target, self.eta, len(self.budgets), remeasure=self.replica, noise_rule=self.noise_rule)
        self.decide = StoreRungGate(self.store.url, "replay", ladder)
        self._by = {(r["config"], r["seed"], budget_key(r["budget_flops"])): r for r in self.rows}
        self._reached: dict[int, int] = {}

    def close(self) -> None:
        self.store.close()
        self._dir.cleanup()

    def _result(self, config: int, seed: int, rung: int) -> dict:
        r = self._by[(config, seed, budget_key(self.budgets[rung]))]
        result = {
            "rung": rung,
            "budget_flops": r["budget_flops"],
            "steps": 1,
            "tokens": r["tokens"],
            "val_loss": r["val_loss"],
            "training_flops": r["compute_flops"],
        }
        if self.replica:
            result |= {k: r[src] for k, src in (("d_model", "replica_d_model"), ("params", "replica_params"))}
            result |= {k: r[k] for k in ("tokens_per_param", "target_tokens_per_param", "on_path")}
        return result

    def _cost(self, config: int, seed: int, rung: int) -> float:
        if self.replica:
            return self._by[(config, seed, budget_key(self.budgets[rung]))]["compute_flops"]
        return self.budgets[rung]  # the main run's part up to this rung; its branches are added per rung below

    def propose(self, config: int) -> float:
        """Config `config` arrives as the next trial: it climbs its rungs as the decider says. Its compute."""
        number, first = len(self.arrivals), self._by[(config, 0, budget_key(self.budgets[0]))]
        self.arrivals.append(config)
        flops = first["executed_flops_per_token"]
        trial_id = self.store.start_trial("replay", number=number, config={"residual": first["residual"]})
        spent, rung = 0.0, 0
        while True:
            decision = self.decide(number, 0, flops, self._result(config, 0, rung))
            spent = self._cost(config, 0, rung) if not self.replica else spent + self._cost(config, 0, rung)
            if decision.measure_again:
                again = {**self._result(config, 1, rung), "seed": REMEASURE_SEED_OFFSET}
                decision = self.decide(number, REMEASURE_SEED_OFFSET, flops, again)
                spent += self._cost(config, 1, rung)
            if not decision.promote:
                break
            rung += 1
        if not self.replica:  # one run to rung r, plus the cooldown branch of every rung below it
            spent += self.cooldown * sum(self.budgets[:rung])
        self._reached[number] = rung + 1
        self.store.finish_trial(
            trial_id,
            {"status": TrialStatus.COMPLETED, "val_loss": first["val_loss"], "executed_flops_per_token": flops},
        )
        self.spent += spent
        return spent

    def repeat_front(self) -> float:
        """The front's members measured with the second seed at every rung they reached and lack it for. Its compute."""
        answer = self.answer()
        front = front_at_target(self.store.trials("replay", statuses=[TrialStatus.COMPLETED]), answer.predictions)
        have = {(r.number, r.rung) for r in self.store.rungs("replay") if r.seed != 0}
        spent = 0.0
        for row in front:
            config = self.arrivals[row.number]
            todo = [r for r in range(self._reached[row.number]) if (row.number, r) not in have]
            for rung in todo:
                self.store.record_rung("replay", row.number, 1, self._result(config, 1, rung))
                spent += self._cost(config, 1, rung) if self.replica else 0.0
            if todo and not self.replica:  # one run of the second seed up to its top rung, with its branches
                top = self._reached[row.number] - 1
                spent += self.budgets[top] + self.cooldown * sum(self.budgets[:top])
        self.spent += spent
        return spent

    def answer(self) -> Answer:
        return answer_at_target(self.store.rungs("replay"), self.target)

    def by_config(self, per_trial: Mapping[int, object]) -> dict[int, object]:
        """Values keyed by trial number, keyed by config instead."""
        return {self.arrivals[n]: v for n, v in per_trial.items()}

    def reached(self) -> dict[int, int]:
        return self.by_config(self._reached)  # type: ignore[return-value]
