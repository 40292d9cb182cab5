"""Rungs beyond the ladder: a few trials measured once more, above the top rung (anchors) or below it (the level).

After the search's trials and their repeats:

- **Anchors**: the budget's `anchor_plan` says how many it affords and at what budget
  (`workers.ladder.layout.plan_anchors`); `nas.answer.discrepancy.choose_anchors` picks them among the completed
  trials for leverage on the bias's slope in ln(depth / width). Each is its replica at the anchor budget (a wider
  one, nearer the target's shape; the target itself at T), stored as a rung above the top one (`rung` = the
  layout's rung count); the answer fits the top rung's bias through them.
- **The level**: the budget's `level_plan` says how many configs it affords (`workers.ladder.layout.plan_level`);
  `nas.answer.level.choose_level_configs` picks them among the completed trials whose replicas stay on the
  target's path there, for spread in size. Each is trained at the level budgets (a quarter and a third of the top
  rung) as replicas that keep the head count (`SearchLadder.level_narrowing`), stored as rungs below rung 0
  (-2, -1); the answer fits its level curve through them (`nas.answer.level`).

Each job is a Ray task of one CPU; every reader of the store sees its rungs (`nas.search_answer`). A job already
stored is not trained again (`nas resume` finishes the rest); a lost one weakens the answer (it then rests on those
that ran, or none) and never fails the search.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace

from search_spaces.residual_lm import parameter_count
from workers.ladder.plans import InfeasibleBudget
from workers.ladder.replica import plan_replica
from workers.status import TrialStatus
from workers.trial.contract import TrialRequest

from ..answer.discrepancy import aspect, choose_anchors
from ..answer.level import MIN_CONFIGS, choose_level_configs
from ..answer.target import answer_at_target
from ..search_answer import trial_shapes
from ..space import SearchSpace
from ..space.budget import Budget
from ..store import RungRow, Store
from .ray_env import init_ray
from .repeats import measure_again
from .settings import SearchSettings, data_config
from .study import DefineByRun
from .trainable import TrialPlanner

__all__ = ["ExtraJob", "anchor_jobs", "level_jobs", "measure_anchors", "measure_level"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExtraJob:
    """Trial `number` trained as its replicas at the budgets of `request`, its k-th rung stored as rung `rungs[k]`."""

    number: int
    rungs: tuple[int, ...]
    request: TrialRequest


def _above(row: RungRow, top: float) -> bool:
    return row.budget_flops > top * (1 + 1e-9)


def anchor_jobs(
    store: Store, name: str, space: SearchSpace, budget: Budget, settings: SearchSettings
) -> list[ExtraJob]:
    """The anchors the search affords and has not stored yet."""
    trials = store.trials(name, statuses=[TrialStatus.COMPLETED])
    plan = budget.anchor_plan(len(trials))
    if plan.count == 0:
        log.info("anchors: %s", plan.reason)
        return []
    ladder = budget.ladder
    layout = ladder.layout
    rows = store.rungs(name)
    measured = [r for r in rows if 0 <= r.rung < layout.rungs]  # the layout's rungs: no anchor nor level rung
    predictions = answer_at_target(measured, ladder.target_flops).predictions
    shapes = trial_shapes(space, trials)
    losses = {n: p.loss for n, p in predictions.items() if n in shapes and math.isfinite(p.loss)}
    chosen = choose_anchors({n: aspect(*shapes[n][:2]) for n in losses}, losses, plan.count)
    stored = {r.number for r in rows if _above(r, layout.top_flops)}
    planner = TrialPlanner(data_config(settings), settings.seed, ladder.replicas_at((plan.flops,)))
    tickets = DefineByRun(space, budget)
    by_number = {t.number: t for t in trials}
    todo = []
    for number in chosen:
        if number in stored:
            continue
        ticket = tickets.ticket(number, {k: v for k, v in by_number[number].config.items() if k in space.sampled})
        todo.append(ExtraJob(number, (layout.rungs,), planner.request(ticket, width_probe=False)))
    return todo


def level_jobs(store: Store, name: str, space: SearchSpace, budget: Budget, settings: SearchSettings) -> list[ExtraJob]:
    """The level configs the search affords and has not stored yet (module docstring)."""
    trials = store.trials(name, statuses=[TrialStatus.COMPLETED])
    plan = budget.level_plan(len(trials))
    if plan.count == 0:
        log.info("level: %s", plan.reason)
        return []
    ladder, tickets = budget.ladder, DefineByRun(space, budget)
    lowest, rows = min(plan.budgets), store.rungs(name)
    measured = {r.number for r in rows if r.val_loss is not None and math.isfinite(r.val_loss)}
    sizes, configs = {}, {}
    for row in trials:
        ticket = tickets.ticket(row.number, {k: v for k, v in row.config.items() if k in space.sampled})
        if ticket.configs is None or row.number not in measured:
            continue
        try:
            replica = plan_replica(ticket.configs.arch, ladder.target_flops, 0, lowest,
                                   ticket.configs.run.batch_size, ladder.level_narrowing)  # fmt: skip
        except InfeasibleBudget:
            continue
        if replica.on_path:
            sizes[row.number], configs[row.number] = float(parameter_count(ticket.configs.arch)), ticket
    stored = {r.number for r in rows if r.rung < 0}  # level rungs are numbered below the layout's
    planner = TrialPlanner(
        data_config(settings), settings.seed, ladder.replicas_at(plan.budgets, ladder.level_narrowing)
    )
    chosen = choose_level_configs(sizes, plan.count)
    if len(chosen) < MIN_CONFIGS:  # one curve has no shared floor: its runs would buy nothing
        log.info("level: %d config(s) on the target's path, %d needed for a curve", len(chosen), MIN_CONFIGS)
        return []
    rungs = tuple(range(-len(plan.budgets), 0))
    return [ExtraJob(n, rungs, planner.request(configs[n], width_probe=False)) for n in chosen if n not in stored]


def measure_anchors(store: Store, name: str, space: SearchSpace, budget: Budget, settings: SearchSettings) -> int:
    """Train the anchors the search affords and lacks; how many ran."""
    return _run(store, name, anchor_jobs(store, name, space, budget, settings), settings, "anchors")


def measure_level(store: Store, name: str, space: SearchSpace, budget: Budget, settings: SearchSettings) -> int:
    """Train the level configs the search affords and lacks; how many ran."""
    return _run(store, name, level_jobs(store, name, space, budget, settings), settings, "level")


def _run(store: Store, name: str, todo: list[ExtraJob], settings: SearchSettings, what: str) -> int:
    """Train `todo` as Ray tasks of one CPU and store their rungs under the rungs each job names; a lost job is
    logged, never raised."""
    if not todo:
        return 0
    init_ray(settings)
    import ray

    task = ray.remote(num_cpus=1)(measure_again)
    refs = {task.remote(j.request): j for j in todo}
    budgets = ", ".join(f"{f:.3g}" for f in todo[0].request.ladder_plan.replica_flops)
    log.info("%s: trials %s at %s training FLOPs", what, ", ".join(str(j.number) for j in todo), budgets)
    for ref, job in refs.items():
        try:
            records = ray.get(ref)
        except ray.exceptions.RayError as err:
            log.warning("%s: trial %d failed: %s", what, job.number, str(err).splitlines()[0])
            continue
        for record in records:
            store.record_rung(name, job.number, replace(record, rung=job.rungs[record.rung]))
    return len(todo)
