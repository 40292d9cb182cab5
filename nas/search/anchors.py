"""Anchors: a few trials measured once more above the top rung, so that the answer can take out the top rung's bias.

After the search's trials and their repeats, the budget's `anchor_plan` says how many anchors it affords and at
what budget (`workers.ladder.layout.plan_anchors`); `nas.answer.discrepancy.choose_anchors` picks them among the
completed trials for leverage on the bias's slope in ln(depth / width). Each is its replica at the anchor budget
(a wider one, nearer the target's shape; the target itself at T), trained as a Ray task of one CPU and stored as a
rung above the top one (`rung` = the layout's rung count), so that every reader of the store sees it and the
answer (`nas.search_answer`) fits the discrepancy through it. An anchor
already stored is not trained again (`nas resume` finishes the rest).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace

from workers.status import TrialStatus
from workers.trial.contract import TrialRequest

from ..answer.discrepancy import aspect, choose_anchors
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

__all__ = ["AnchorJob", "anchor_jobs", "measure_anchors"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AnchorJob:
    """One anchor: trial `number` trained as its replica at the anchor budget, stored as rung `rung`."""

    number: int
    rung: int
    request: TrialRequest


def _above(row: RungRow, top: float) -> bool:
    return row.budget_flops > top * (1 + 1e-9)


def anchor_jobs(
    store: Store, name: str, space: SearchSpace, budget: Budget, settings: SearchSettings
) -> list[AnchorJob]:
    """The anchors the search affords and has not stored yet."""
    trials = store.trials(name, statuses=[TrialStatus.COMPLETED])
    plan = budget.anchor_plan(len(trials))
    if plan.count == 0:
        log.info("anchors: %s", plan.reason)
        return []
    ladder = budget.ladder
    layout = ladder.layout
    rows = store.rungs(name)
    measured = [r for r in rows if not _above(r, layout.top_flops)]  # the choice ignores anchors already stored
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
        todo.append(AnchorJob(number, layout.rungs, planner.request(ticket, width_probe=False)))
    return todo


def measure_anchors(store: Store, name: str, space: SearchSpace, budget: Budget, settings: SearchSettings) -> int:
    """Train the anchors the search affords and lacks; how many ran. A lost anchor weakens the correction (the
    answer then rests on those that ran, or none); it never fails the search."""
    todo = anchor_jobs(store, name, space, budget, settings)
    if not todo:
        return 0
    init_ray(settings)
    import ray

    task = ray.remote(num_cpus=1)(measure_again)
    refs = {task.remote(j.request): j for j in todo}
    flops = todo[0].request.ladder_plan.top_flops
    log.info("anchors: trials %s at %.3g training FLOPs each", ", ".join(str(j.number) for j in todo), flops)
    for ref, job in refs.items():
        try:
            records = ray.get(ref)
        except ray.exceptions.RayError as err:
            log.warning("anchor trial %d failed: %s", job.number, str(err).splitlines()[0])
            continue
        for record in records:
            store.record_rung(name, job.number, replace(record, rung=job.rung))
    return len(todo)
