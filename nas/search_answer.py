"""A search's answer at a target T, read from the store and computed once: what `nas show`, `nas export`, `nas effects`
and the dashboard all show.

`SearchAnswer` holds the search's stored budget and objectives, its trial rows and rung rows, the answer at T
(`nas.answer.target.answer_at_target`: every trial's prediction, band and basis; None for a search without rungs,
whose front is its measured one), the front at T on the search's own objectives, the hypervolume there and its
reference point, and what the answer rests on (`nas.answer.decisions.rests_on`).

`search_answer(store, name, target)` computes it once per store, search, T and write: the answer is kept until the
store's last write to that search (`Store.last_write`: a trial started or finished, a rung stored) changes, so a
dashboard refreshing a running search recomputes only when there is something new.

`SearchAnswer.as_dict` is the answer as data (`nas show NAME --json`): strict JSON, its keys documented in
docs/reference.md and kept stable (`JSON_KEYS`, `TRIAL_KEYS`).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from workers.status import TrialStatus
from workers.strict_json import sanitise_json

from .answer.decisions import rests_on, trial_facts
from .answer.error_model import NO_MODEL, measured_model
from .answer.forecast import Forecasting, forecast_at_target
from .answer.pareto import hypervolume, reference_point
from .answer.target import Answer, Prediction, at_target, front_at_target
from .space import SearchSpace, space_from_dict, to_configs
from .space.budget import Budget, BudgetError, stored_budget
from .space.objectives import Objective, front_costs, inference_cost_of, objectives_of
from .store import RungRow, SearchRow, Store, TrialRow

__all__ = [
    "CACHED_ANSWERS",
    "JSON_KEYS",
    "TRIAL_KEYS",
    "SearchAnswer",
    "search_answer",
    "search_forecasting",
    "trial_shapes",
]

CACHED_ANSWERS = 32  # answers a process keeps (a dashboard showing a few searches at a few targets)
# The keys of `SearchAnswer.as_dict`, and of each of its trials: documented in docs/reference.md, kept stable.
JSON_KEYS = (
    "search",
    "status",
    "settings",
    "trials",
    "front",
    "rests_on",
    "hypervolume",
    "predictor",
    "bands",
    "losses_are",
    "level",
)
TRIAL_KEYS = (
    "number",
    "status",
    "config",
    "loss_at_target",
    "band",
    "sd",
    "corrected_top_rung_loss",
    "rests_on",
    "measured_loss",
    "training_flops",
    "executed_flops_per_token",
    "kv_bytes_per_token",
    "decode_flops_per_token",
    "failure_reason",
)


@dataclass(frozen=True)
class SearchAnswer:
    """Search `search`'s answer at `target` (module docstring). `budget` is None when the stored one cannot be read;
    `target` is then None unless one was asked for."""

    search: SearchRow
    budget: Budget | None
    target: float | None
    objectives: tuple[Objective, ...]
    rows: tuple[TrialRow, ...]
    rungs: tuple[RungRow, ...]
    answer: Answer | None
    front: tuple[TrialRow, ...]  # the front at T, each row carrying its predicted loss there (measured: no rungs)
    reference: tuple[float, float]
    hypervolume: float
    rests_on: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.search.name

    @property
    def predictions(self) -> dict[int, Prediction]:
        """Each trial's prediction at T ({} without an answer)."""
        return self.answer.predictions if self.answer is not None else {}

    def as_dict(self) -> dict[str, Any]:
        """The answer as strict JSON data (module docstring): the search's settings, every trial with its prediction
        at T and what it rests on, the front at T (trial numbers, by cost), what the answer rests on, the
        hypervolume at T against its reference point, the predictor and the bands."""
        budget, answer = self.budget, self.answer
        settings = {
            "target_flops": self.target,
            "objectives": [str(o) for o in self.objectives],
            "layout": None if budget is None else _layout(budget),
            "level": None if budget is None else budget.level_plan().reason,
            "candidates": len(self.search.space.get("candidates") or []) if isinstance(self.search.space, dict) else 0,
        }
        return sanitise_json(
            {
                "search": self.name,
                "status": str(self.search.status),
                "settings": settings,
                "trials": [self._trial(row) for row in self.rows],
                "front": [row.number for row in self.front],
                "rests_on": list(self.rests_on),
                "hypervolume": {"value": self.hypervolume, "reference": list(self.reference)},
                "predictor": None if answer is None else answer.backtest.describe(),
                "bands": None if answer is None else _bands(answer),
                "losses_are": self.losses_are,
                "level": None if answer is None or answer.level is None else answer.level.describe(),
            }
        )

    @property
    def losses_are(self) -> str:
        """What the losses this answer states are: `loss at T` (carried there by a curve), `top rung` (its top
        rung's, no curve carried them), or `measured` (a search without rungs)."""
        if self.answer is None:
            return "measured"
        return "loss at T" if self.answer.at_target else "top rung"

    def _trial(self, row: TrialRow) -> dict[str, Any]:
        p = self.predictions.get(row.number)
        cost = inference_cost_of(row)
        seeds = len({g.seed for g in self.rungs if g.number == row.number})
        rests = None
        if p is not None:
            facts = self.answer.facts.get(row.number) if self.answer is not None else None
            model = self.answer.model if self.answer is not None else None
            measured = None if facts is None or model is None else model.measured_at(facts)
            rests = {"rungs": p.rungs, "seeds": seeds, "predictor": p.predictor, "basis": p.basis,
                     "held_out_error": p.loo_error, "top_rung_steps": None if facts is None else facts.steps,
                     "within_measured_steps": measured}  # fmt: skip
        spent = None if row.training_flops is None else row.training_flops + (row.branch_flops or 0.0)
        at_t = p is not None and p.at_target
        return {
            "number": row.number,
            "status": str(row.status),
            "config": {k: v for k, v in row.config.items() if k not in ("arch", "optim")},
            "loss_at_target": p.loss if p is not None and at_t else None,
            "band": [p.low, p.high] if p is not None and at_t and p.low is not None and p.high is not None else None,
            "sd": p.sd if p is not None and at_t else None,
            "corrected_top_rung_loss": p.loss if p is not None and not at_t else None,
            "rests_on": rests,
            "measured_loss": row.val_loss,
            "training_flops": spent,
            "executed_flops_per_token": row.executed_flops_per_token,
            "kv_bytes_per_token": None if cost is None else cost.kv_bytes_per_token,
            "decode_flops_per_token": None if cost is None else cost.decode_flops_per_token,
            "failure_reason": row.failure_reason,
        }

    @property
    def at_target(self) -> list[TrialRow]:
        """Every row with its val_loss the predicted loss at T (inf without a prediction); the rows themselves for a
        search without rungs."""
        return at_target(self.rows, self.predictions) if self.predictions else list(self.rows)


def _bands(answer: Answer) -> str:
    """How the answer's bands are made, in a line."""
    if answer.model is not None and answer.facts:
        return "80% bands from the error model: " + answer.model.describe()
    return answer.calibration.describe()


def _layout(budget: Budget) -> dict[str, Any]:
    """The rungs a search's trials climb as it chose them (`Budget.ladder`): what each rung trains, the
    rungs' training budgets and why this layout."""
    ladder = budget.ladder
    layout = ladder.layout
    budgets = [layout.lowest_flops * layout.eta**r for r in range(layout.rungs)]
    return {"ladder": ladder.kind, "rungs": layout.rungs, "eta": layout.eta, "budgets": budgets, "why": layout.reason}


def search_answer(store: Store, name: str, target: float | None = None) -> SearchAnswer:
    """Search `name`'s answer at `target` (default: the search's own T), computed once per write (module
    docstring). Raises the store's `UnknownSearch` for an unknown name."""
    written = store.last_write(name)
    key = (store.url, name, target)
    with _lock:
        kept = _answers.get(key)
        if kept is not None and kept[0] == written:
            _answers.move_to_end(key)
            return kept[1]
    found = _computed(store, name, target)
    with _lock:
        _answers[key] = (written, found)
        while len(_answers) > CACHED_ANSWERS:
            _answers.popitem(last=False)
    return found


_answers: OrderedDict[tuple[str, str, float | None], tuple[datetime, SearchAnswer]] = OrderedDict()
_lock = threading.Lock()


def _computed(store: Store, name: str, target: float | None) -> SearchAnswer:
    search, rows, rungs = store.get_search(name), tuple(store.trials(name)), tuple(store.rungs(name))
    try:
        budget: Budget | None = stored_budget(search.budget)
    except (BudgetError, KeyError, TypeError):
        budget = None
    if target is None and budget is not None:
        target = budget.ladder.target_flops
    answer = None
    if rungs and target is not None and math.isfinite(target):
        forecasting = _forecasting(search, budget, rows) if budget is not None else None
        answer = forecast_at_target(rungs, target, forecasting)
    predictions = answer.predictions if answer is not None else {}
    objectives = objectives_of(search.settings)
    key, also = front_costs(objectives)
    front = tuple(front_at_target(rows, predictions, key=key, also=also))
    ref = reference_point(rows)
    targeted = at_target(rows, predictions) if predictions else list(rows)
    basis = rests_on(answer, [r.number for r in front], *trial_facts(rows)) if predictions else []
    return SearchAnswer(
        search, budget, target, objectives, rows, rungs, answer, front, ref, hypervolume(targeted, ref), tuple(basis)
    )


def trial_shapes(space: SearchSpace, trials: Sequence[TrialRow]) -> dict[int, tuple[int, int, str]]:
    """Each completed trial's target shape and family (n_layers, d_model, residual), from its sampled knobs and the
    space's fixed ones."""
    out = {}
    for row in trials:
        if str(row.status) != TrialStatus.COMPLETED or not row.config:
            continue
        try:
            arch = to_configs(space, {k: v for k, v in row.config.items() if k in space.sampled})[0]
        except ValidationError:
            continue
        out[row.number] = (arch.n_layers, arch.d_model, arch.residual)
    return out


def search_forecasting(space: SearchSpace, budget: Budget, trials: Sequence[TrialRow]) -> Forecasting | None:
    """What a search's answer knows beyond its rungs (`nas.answer.forecast`): each trial's shape and family, the
    layout's rungs, and the error model (measured on the fidelity corpora; without its bias prior where the search
    says `--bias-prior none`). None on a single budget or a budget ladder: the study's rungs alone."""
    ladder = budget.ladder
    if not ladder.is_replica:
        return None
    model = measured_model()
    if budget.bias_prior != "measured":
        model = replace(model, bias=NO_MODEL.bias)
    shapes = trial_shapes(space, trials)
    return Forecasting(
        {n: (layers, width) for n, (layers, width, _) in shapes.items()},
        {n: family for n, (_, _, family) in shapes.items()},
        ladder.layout.lowest_flops,
        ladder.top_flops,
        model,
        offset_applies=ladder.narrowing != ladder.level_narrowing,
    )


def _forecasting(search: SearchRow, budget: Budget, rows: Sequence[TrialRow]) -> Forecasting | None:
    try:
        space = space_from_dict(search.space)
    except (ValidationError, KeyError, TypeError, ValueError):  # a stored space this resnas cannot read
        return None
    return search_forecasting(space, budget, rows)
