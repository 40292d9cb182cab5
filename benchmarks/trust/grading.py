"""Replaying a search on a committed table of real runs, and grading its answer at the target against the configs
trained for real there: what `benchmarks.trust.fidelity` and `benchmarks.trust.ladder_efficiency` share. Tables are
read with `benchmarks.harness.read_table`.

Replaying:
- `SearchReplay`: a search replayed through the search's own rung gate (`nas.search.rung_gate.StoreRungGate`) on a
  real SQLite store: configs arrive in a given order, each climbs the rungs the gate promotes it to, measures a
  rung again where the gate asks (the table's second seed), at the end the front's members get their second
  seed (`nas search --repeat-seeds 1`), and then its anchors (`nas.answer.discrepancy.choose_anchors`, the
  table's anchor runs) are measured. What it paid for is counted; what it answers is
  `nas.answer.target.answer_at_target` over what it stored, anchored.
- Where a sampler proposes the configs (TPE or random), `benchmarks.harness.TableSampler` asks it; a table with one
  run per config (no rungs to gate) is searched by `benchmarks.harness.sample_table` alone.
- `graded_rows`: the configs every table holds in full; a config still being built is left out of the grading.
- `graded_replay`, `over_orders`: a search replayed and graded, in one arrival order and over `ORDERS` of them.

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
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from nas.answer.calibration import calibrate, coverage
from nas.answer.decisions import kendall
from nas.answer.discrepancy import NO_PRIOR, Anchoring, BiasPrior, aspect, choose_anchors
from nas.answer.extrapolate import RungPoint, budget_key, seed_noise
from nas.answer.pareto import FrontPoint, hypervolume, pareto_rows
from nas.answer.rung_decision import REMEASURE_SEED_OFFSET, PromotionRule
from nas.answer.target import Answer, answer_at_target, front_at_target
from nas.search.rung_gate import StoreRungGate
from nas.store import RungRow, Store
from workers.status import TrialStatus
from workers.training.records import RungRecord
from workers.trial.contract import CountedCosts, Verdict
from workers.trial.result import TrialResult

__all__ = [
    "BAND_GAMMAS",
    "ORDERS",
    "SearchReplay",
    "Truth",
    "as_rows",
    "bands_of",
    "bands_with",
    "baselines",
    "front_of",
    "grade",
    "graded_replay",
    "graded_rows",
    "hv_ratio",
    "losses_at",
    "over_orders",
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
    noise_rule: bool = True  # `PromotionRule.noise_rule`: off replays plain MO-ASHA
    anchor_rows: Sequence[dict] = ()  # every config's anchor run (one seed): the table a search's anchors come from
    anchors: int = 0  # how many the search trains
    prior: BiasPrior = NO_PRIOR  # the top rung's bias the answer takes out (`nas search --bias-prior`)
    spent: float = 0.0
    arrivals: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="resnas-replay-")
        self.store = Store(f"sqlite:///{self._dir.name}/replay.db")
        self.store.create_search(
            "replay", requested_trials=1, budget={}, space={}, settings={}, optuna_study_name=None, code_version=None
        )
        ladder = PromotionRule(
            self.target, self.eta, len(self.budgets), remeasure=self.replica, noise_rule=self.noise_rule
        )
        self.decide = StoreRungGate(self.store.url, "replay", ladder)
        self._by = {(r["config"], r["seed"], budget_key(r["budget_flops"])): r for r in self.rows}
        self._shape = {r["config"]: (r["n_layers"], r["d_model"]) for r in self.rows}
        self._family = {r["config"]: r["residual"] for r in self.rows}
        self._anchor = {r["config"]: r for r in self.anchor_rows}
        self._reached: dict[int, int] = {}
        self.anchored: list[int] = []  # the configs measured as anchors

    def close(self) -> None:
        self.store.close()
        self._dir.cleanup()

    def _result(self, config: int, seed: int, rung: int) -> RungRecord:
        return self._result_of(self._by[(config, seed, budget_key(self.budgets[rung]))], rung)

    def _result_of(self, r: dict, rung: int) -> RungRecord:
        replica = {}
        if self.replica:
            replica = {k: r[src] for k, src in (("d_model", "replica_d_model"), ("params", "replica_params"))}
            replica |= {k: r[k] for k in ("tokens_per_param", "target_tokens_per_param", "on_path")}
        return RungRecord(
            rung, r["seed"], r["budget_flops"], 1, r["tokens"], r["val_loss"], r["compute_flops"], **replica
        )

    def _cost(self, config: int, seed: int, rung: int) -> float:
        if self.replica:
            return self._by[(config, seed, budget_key(self.budgets[rung]))]["compute_flops"]
        return self.budgets[rung]  # the main run's part up to this rung; its branches are added per rung below

    def propose(self, config: int) -> float:
        """Config `config` arrives as the next trial: it climbs its rungs as the decider says. Its compute."""
        number, first = len(self.arrivals), self._by[(config, 0, budget_key(self.budgets[0]))]
        self.arrivals.append(config)
        flops = first["executed_flops_per_token"]
        trial_id = self.store.start_trial(
            "replay", number=number, config={"residual": first["residual"]}, costs=CountedCosts(flops)
        )
        spent, rung = 0.0, 0
        while True:
            decision = self.decide(number, flops, self._result(config, 0, rung))
            spent = self._cost(config, 0, rung) if not self.replica else spent + self._cost(config, 0, rung)
            if decision.verdict == Verdict.MEASURE_AGAIN:
                again = replace(self._result(config, 1, rung), seed=REMEASURE_SEED_OFFSET)
                decision = self.decide(number, flops, again)
                spent += self._cost(config, 1, rung)
            if decision.verdict != Verdict.CLIMB:
                break
            rung += 1
        if not self.replica:  # one run to rung r, plus the cooldown branch of every rung below it
            spent += self.cooldown * sum(self.budgets[:rung])
        self._reached[number] = rung + 1
        self.store.finish_trial(trial_id, TrialResult.loss_only(first["val_loss"], flops))
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
                self.store.record_rung("replay", row.number, self._result(config, 1, rung))
                spent += self._cost(config, 1, rung) if self.replica else 0.0
            if todo and not self.replica:  # one run of the second seed up to its top rung, with its branches
                top = self._reached[row.number] - 1
                spent += self.budgets[top] + self.cooldown * sum(self.budgets[:top])
        self.spent += spent
        return spent

    def measure_anchors(self) -> float:
        """The search's anchors, chosen from its answer so far among the trials it trained, measured (the table's
        anchor run of each, stored as a rung above the top one). Its compute."""
        if self.anchors < 2 or not self.anchor_rows:
            return 0.0
        predictions = self.answer().predictions
        trained = [n for n in range(len(self.arrivals)) if n in predictions]
        aspects = {n: aspect(*self._shape[self.arrivals[n]]) for n in trained}
        spent = 0.0
        for number in choose_anchors(aspects, {n: predictions[n].loss for n in trained}, self.anchors):
            row = self._anchor[self.arrivals[number]]
            self.store.record_rung("replay", number, self._result_of(row, len(self.budgets)))
            self.anchored.append(self.arrivals[number])
            spent += row["compute_flops"]
        self.spent += spent
        return spent

    def run(self, order: Sequence[int]) -> Answer:
        """The whole search: every config of `order` proposed in turn, then the front's repeats, then its anchors.
        Its answer."""
        for config in order:
            self.propose(config)
        self.repeat_front()
        self.measure_anchors()
        return self.answer()

    def anchoring(self) -> Anchoring | None:
        """How the answer takes the top rung's bias out (None: no prior and no anchors)."""
        if self.prior == NO_PRIOR and (self.anchors < 2 or not self.anchor_rows):
            return None
        shapes = {n: self._shape[c] for n, c in enumerate(self.arrivals)}
        families = {n: self._family[c] for n, c in enumerate(self.arrivals)}
        return Anchoring(shapes, families, max(self.budgets), self.prior)

    def answer(self) -> Answer:
        return answer_at_target(self.store.rungs("replay"), self.target, self.anchoring())

    def estimates(self, answer: Answer | None = None) -> dict[int, float]:
        """The predicted loss at T of every config proposed so far, keyed by config (of `answer`, else now)."""
        predictions = (answer or self.answer()).predictions
        return self.by_config({n: p.loss for n, p in predictions.items()})  # type: ignore[return-value]

    def by_config(self, per_trial: Mapping[int, object]) -> dict[int, object]:
        """Values keyed by trial number, keyed by config instead."""
        return {self.arrivals[n]: v for n, v in per_trial.items()}

    def reached(self) -> dict[int, int]:
        return self.by_config(self._reached)  # type: ignore[return-value]


def graded_replay(rows, truth: Truth, budgets, eta: float, order: Sequence[int], **search_options) -> dict:
    """One search replayed on the table (`SearchReplay`, `search_options` its further fields: `replica`,
    `noise_rule`, `anchor_rows`, `anchors`, `prior`), configs arriving in `order`; graded, with its compute."""
    search = SearchReplay(rows, budgets, eta, truth.target, **search_options)
    try:
        answer = search.run(order)
        predicted = search.estimates(answer)
        bands = search.by_config(bands_of(answer))
        reached = search.reached()
        return grade(predicted, truth, bands) | {
            "compute_share": search.spent / truth.compute,
            "configs_per_rung_reached": {
                str(k): sum(v == k for v in reached.values()) for k in range(1, len(budgets) + 1)
            },
            "predictor": answer.backtest.chosen,
            "backtest": answer.backtest.describe(),
            "bands": answer.calibration.describe(),
            "band_coverage_by_gamma": {
                str(g): grade(predicted, truth, search.by_config(bands_with(answer, truth.target, g)))["band_coverage"]
                for g in BAND_GAMMAS
            },
            "reliability": {f"{b:.3g}": r.tau for b, r in answer.reliability.items()},
            "seed_noise": answer.noise,
            "anchors": search.anchored,
            "discrepancy": answer.discrepancy.describe() if answer.discrepancy else None,
            "predicted": predicted,
        }
    finally:
        search.close()


def arrival_orders(configs: Sequence[int]) -> list[list[int]]:
    """The table's order and ORDERS - 1 random permutations of it (seeded): the orders every replay is run in."""
    rng = np.random.default_rng(0)
    ordered = sorted(configs)
    return [ordered] + [[int(c) for c in rng.permutation(ordered)] for _ in range(ORDERS - 1)]


def over_orders(rows, truth: Truth, budgets, eta: float, **search_options) -> dict:
    """The replay in table order, and its figures averaged over ORDERS arrival orders (table order first)."""
    orders = arrival_orders(list(truth.runs))
    runs = [graded_replay(rows, truth, budgets, eta, order, **search_options) for order in orders]
    keys = ("kendall_tau", "regret_in_seed_noise", "hypervolume_ratio_nadir", "band_coverage", "compute_share")
    mean = {k: _mean([r[k] for r in runs]) for k in keys}
    mean["true_best_in_predicted_top3"] = float(np.mean([r["true_best_in_predicted_top3"] for r in runs]))
    mean["band_coverage_by_gamma"] = {
        g: _mean([r["band_coverage_by_gamma"][g] for r in runs]) for g in runs[0]["band_coverage_by_gamma"]
    }
    mean["kendall_tau_min"] = float(min(r["kendall_tau"] for r in runs))
    return {
        "table_order": runs[0],
        f"mean_over_{ORDERS}_orders": mean,
        "per_order_predicted": [r["predicted"] for r in runs],
    }


def _mean(values) -> float | None:
    """The mean of the values that are not None (None if none is)."""
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else None
