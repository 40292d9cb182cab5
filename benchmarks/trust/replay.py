"""A search replayed on a committed table of real runs, through the search's own rules: what every benchmark that
replays a search runs (`benchmarks.trust.grading`, `benchmarks.trust.ladder_efficiency`).

`SearchReplay` keeps a real SQLite store. Configs arrive in a given order; each climbs the rungs the search's rung
gate promotes it to (`nas.search.rung_gate.StoreRungGate`), measuring a rung again where the gate asks (the table's
second seed). Then, as a search does after its trials: the front's members get their second seed (the members
`nas.search.repeats.front_to_repeat` picks from the search's own answer), the anchors
(`nas.answer.discrepancy.choose_anchors`, the table's anchor runs) and the level configs
(`nas.answer.level.choose_level_configs`, the table's keep-heads rungs at `workers.ladder.layout.LEVEL_SHARES` of
the top rung) are measured. What it paid for is counted; what it answers is
`nas.answer.forecast.forecast_at_target` over what it stored, with the error model it is given (for a graded
corpus, fitted on the other corpora).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from benchmarks.harness import TableSampler
from benchmarks.trust.grading import Truth, as_rows
from nas.answer.discrepancy import aspect, choose_anchors
from nas.answer.error_model import NO_MODEL, ErrorModel
from nas.answer.extrapolate import budget_key
from nas.answer.forecast import Forecasting, forecast_at_target
from nas.answer.level import choose_level_configs
from nas.answer.pareto import pareto_rows
from nas.answer.rung_decision import REMEASURE_SEED_OFFSET, PromotionRule
from nas.answer.target import Answer
from nas.search.repeats import front_to_repeat
from nas.search.rung_gate import StoreRungGate
from nas.store import Store
from workers.ladder.layout import LEVEL_SHARES
from workers.status import TrialStatus
from workers.training.records import RungRecord
from workers.trial.contract import CountedCosts, Verdict
from workers.trial.result import TrialResult

__all__ = ["RandomProposer", "SearchReplay", "SingleBudget", "TpeProposer", "replay_proposals", "sample_table"]


@dataclass
class SearchReplay:
    """A search replayed on a table (module docstring).

    `rows`: the table's rung rows (replica rows, or budget-ladder rows); `budgets`: the rung budgets of the
    ladder replayed, lowest first; `eta`: its promotion ratio; `replica`: replica rungs (each its own run, so a
    rung can be measured again) or a budget ladder (one run: stopping at rung r costs C_r plus the cooldown
    branches below, `cooldown` x each); `model`: the error model its answer reads (`NO_MODEL` and no anchors:
    the study's rungs alone)."""

    rows: Sequence[dict]
    budgets: Sequence[float]
    eta: float
    target: float
    replica: bool = True
    cooldown: float = 0.2
    noise_rule: bool = True  # `PromotionRule.noise_rule`: off replays plain MO-ASHA
    anchor_rows: Sequence[dict] = ()  # every config's anchor run (one seed): the table a search's anchors come from
    anchors: int = 0  # how many the search trains
    model: ErrorModel = NO_MODEL  # what the answer reads (`nas search --bias-prior`: the model's bias part)
    level_rows: Sequence[dict] = ()  # every config's keep-heads rungs: the table the level configs come from
    level_configs: int = 0  # how many the search measures for its level at T
    spent: float = 0.0
    arrivals: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="resnas-replay-")
        self.store = Store(f"sqlite:///{self._dir.name}/replay.db")
        self.store.create_search(
            "replay", requested_trials=1, budget={}, space={}, settings={}, optuna_study_name=None, code_version=None
        )
        rule = PromotionRule(self.target, self.eta, len(self.budgets), remeasure=self.replica,
                             noise_rule=self.noise_rule)  # fmt: skip
        self.decide = StoreRungGate(self.store.url, "replay", rule)
        self._by = {(r["config"], r["seed"], budget_key(r["budget_flops"])): r for r in self.rows}
        self._level = {(r["config"], r["seed"], budget_key(r["budget_flops"])): r for r in self.level_rows}
        self._shape = {r["config"]: (r["n_layers"], r["d_model"]) for r in self.rows}
        self._family = {r["config"]: r["residual"] for r in self.rows}
        self._params = {r["config"]: r["params"] for r in self.rows}
        self._anchor = {r["config"]: r for r in self.anchor_rows}
        self._reached: dict[int, int] = {}
        self.anchored: list[int] = []  # the configs measured as anchors
        self.levelled: list[int] = []  # the configs measured for the level at T

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
        """The members `front_to_repeat` picks from the answer, measured with the second seed at every rung they
        reached and lack it for. Its compute."""
        trials = self.store.trials("replay", statuses=[TrialStatus.COMPLETED])
        have = {(r.number, r.rung) for r in self.store.rungs("replay") if r.seed != 0}
        spent = 0.0
        for number in front_to_repeat(self.answer(), trials):
            config = self.arrivals[number]
            todo = [r for r in range(self._reached[number]) if (number, r) not in have]
            for rung in todo:
                self.store.record_rung("replay", number, self._result(config, 1, rung))
                spent += self._cost(config, 1, rung) if self.replica else 0.0
            if todo and not self.replica:  # one run of the second seed up to its top rung, with its branches
                top = self._reached[number] - 1
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

    def level_budgets(self) -> list[float]:
        return [self.budgets[-1] * share for share in LEVEL_SHARES]

    def measure_level(self) -> float:
        """The level configs (`choose_level_configs` among the trials whose level rungs are on the path), their
        keep-heads rungs at `level_budgets` stored below rung 0. Its compute."""
        if self.level_configs < 2 or not self.level_rows or len(self.budgets) > 1:
            return 0.0
        budgets = self.level_budgets()
        lowest = budget_key(budgets[0])
        eligible = {
            n: self._params[c]
            for n, c in enumerate(self.arrivals)
            if (row := self._level.get((c, 0, lowest))) is not None and row["on_path"]
        }
        spent = 0.0
        for number in choose_level_configs(eligible, self.level_configs):
            config = self.arrivals[number]
            for k, flops in enumerate(budgets):
                row = self._level[(config, 0, budget_key(flops))]
                self.store.record_rung("replay", number, self._result_of(row, k - len(budgets)))
                spent += row["compute_flops"]
            self.levelled.append(config)
        self.spent += spent
        return spent

    def run(self, order: Sequence[int]) -> Answer:
        """The whole search: every config of `order` proposed in turn, then the front's repeats, its anchors and
        its level. Its answer."""
        for config in order:
            self.propose(config)
        self.repeat_front()
        self.measure_anchors()
        self.measure_level()
        return self.answer()

    def forecasting(self) -> Forecasting | None:
        """What the answer knows beyond the rungs (None: the study's rungs alone)."""
        if self.model == NO_MODEL and (self.anchors < 2 or not self.anchor_rows):
            return None
        shapes = {n: self._shape[c] for n, c in enumerate(self.arrivals)}
        families = {n: self._family[c] for n, c in enumerate(self.arrivals)}
        return Forecasting(shapes, families, min(self.budgets), max(self.budgets), self.model)

    def answer(self) -> Answer:
        return forecast_at_target(self.store.rungs("replay"), self.target, self.forecasting())

    def estimates(self, answer: Answer | None = None) -> dict[int, float]:
        """The predicted loss at T of every config proposed so far, keyed by config (of `answer`, else now)."""
        predictions = (answer or self.answer()).predictions
        return self.by_config({n: p.loss for n, p in predictions.items()})  # type: ignore[return-value]

    def by_config(self, per_trial: Mapping[int, object]) -> dict[int, object]:
        """Values keyed by trial number, keyed by config instead."""
        return {self.arrivals[n]: v for n, v in per_trial.items()}

    def reached(self) -> dict[int, int]:
        return self.by_config(self._reached)  # type: ignore[return-value]

    def level_error(self, answer: Answer, truth: Truth) -> tuple[float, float] | None:
        """(mean, mean absolute) of the predictions' error against the truth at T, over the configs both have."""
        errors = [p.loss - truth.loss[c] for c, p in self.by_config(answer.predictions).items()
                  if c in truth.loss and math.isfinite(p.loss)]  # type: ignore[attr-defined]  # fmt: skip
        if not errors:
            return None
        return sum(errors) / len(errors), sum(abs(e) for e in errors) / len(errors)


# ---- proposers and strategies of a search replayed on a table with one run per config (or a rung ladder)


class SingleBudget:
    """Every config trained once at one budget; the front by the loss measured there."""

    def __init__(self, losses: dict[int, float], cost: float):
        self.losses, self.cost = losses, cost
        self.seen: dict[int, float] = {}

    def propose(self, config: int) -> float:
        self.seen[config] = self.losses[config]
        return self.cost

    def estimates(self) -> dict[int, float]:
        return self.seen


class RandomProposer:
    """Every config of a table once, in a seeded random order."""

    def __init__(self, table, seed: int):
        self.order = [int(c) for c in np.random.default_rng(seed).permutation(table.configs)]
        self.asks, self.repeats, self.infeasible = len(self.order), 0, 0

    def ask(self) -> int | None:
        return self.order.pop(0) if self.order else None

    def tell(self, config: int, loss: float) -> None:
        pass


class TpeProposer:
    """TPE (`harness.TableSampler`) over (residual, n_layers, d_model) of a table (its `by_arch`, `truth`, `flops`);
    table gaps fail and repeats are answered, both free."""

    def __init__(self, table, seed: int, max_asks: int):
        self.table, self.max_asks = table, max_asks
        keys = list(zip(*table.by_arch, strict=True))
        space = {
            name: sorted(set(v), key=str) for name, v in zip(("residual", "n_layers", "d_model"), keys, strict=True)
        }
        self.sampler = TableSampler(space, "tpe", seed)
        self.known: dict[int, tuple[float, float]] = {}
        self.asks = self.repeats = self.infeasible = 0

    def ask(self) -> int | None:
        while self.asks < self.max_asks and len(self.known) < len(self.table.truth):
            params = self.sampler.ask()
            self.asks += 1
            config = self.table.by_arch.get(tuple(params[k] for k in self.sampler.space))
            if config is None:
                self.infeasible += 1
                self.sampler.tell(None)
            elif config in self.known:
                self.repeats += 1
                self.sampler.tell(self.known[config])
            else:
                return config
        return None

    def tell(self, config: int, loss: float) -> None:
        self.known[config] = (loss, self.table.flops[config])
        self.sampler.tell(self.known[config])


def replay_proposals(proposer, strategy, flops: Mapping[int, float]) -> dict:
    """One search: `proposer` asks configs, `strategy` trains them (`propose(config)`: its compute) and says what
    ranks the front (`estimates()`), which the proposer is told. After each proposal, the compute so far and the
    front (`front`)."""
    compute, fronts, spent = [], [], 0.0
    while (config := proposer.ask()) is not None:
        spent += strategy.propose(config)
        estimates = strategy.estimates()
        proposer.tell(config, estimates[config])
        compute.append(spent)
        fronts.append(front(estimates, flops))
    return dict(compute=compute, fronts=fronts, asks=proposer.asks, repeats=proposer.repeats)


def front(estimates: Mapping[int, float], flops: Mapping[int, float]) -> list[int]:
    """The configs non-dominated by (estimated loss, executed FLOPs/token), as `grading.front_of` picks them."""
    return [r.number for r in pareto_rows(as_rows(estimates, flops))]


def sample_table(
    space: Mapping[str, Sequence], lookup: Callable[[dict], Any], sampler: str, seed: int, trials: int
) -> list:
    """A `TableSampler` search of `trials` trials on a table with one run per config, each trial's knobs looked up
    (`lookup`) and told (a diverged run as an infinite loss); a repeat is a trial, as a search pays for it again.
    The points, in trial order."""
    search, picked = TableSampler(space, sampler, seed), []
    for _ in range(trials):
        picked.append(lookup(search.ask()))
        loss = picked[-1].val_loss
        search.tell((loss if math.isfinite(loss) else math.inf, picked[-1].executed_flops_per_token))
    return picked
