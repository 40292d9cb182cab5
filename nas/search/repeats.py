"""Noise: each member of the front at the target is measured again with more seeds.

After the search's trials, every trial on the front at the target (`nas.answer.target`) is trained again
with `repeat_seeds` more seeds (seed + 1, seed + 2, ...), on the same ladder (replicas or budget rungs)
up to the rung it reached, with the configs it ran (the search's learning-rate schedule included), as
Ray tasks of one CPU each. Their rungs are stored like any other (`Store.record_rung`, keyed by seed),
so the answer averages the seeds, and the seed-to-seed spread (`nas.answer.extrapolate.seed_noise`) is what
`nas show` marks as tied: configs whose predicted losses differ by less than twice it. A repeat already
stored is not run again (`nas resume` finishes the rest).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from workers.status import TrialStatus
from workers.training.records import RungRecord
from workers.trial.contract import TrialRequest
from workers.trial.execute import run_request

from ..answer.target import front_at_target, predict_search
from ..space import SearchSpace
from ..space.budget import Budget
from ..space.objectives import front_costs
from ..store import Store
from .ray_env import init_ray
from .settings import SearchSettings, data_config
from .study import DefineByRun
from .trainable import TrialPlanner

__all__ = ["RepeatJob", "measure_again", "repeat_front", "repeat_jobs"]

log = logging.getLogger(__name__)


def measure_again(request: TrialRequest) -> list[RungRecord]:
    """One repeat in a Ray task of one CPU: the request's ladder with its seed; the rungs it measured."""
    import torch

    torch.set_num_threads(1)
    outcome = run_request(request)
    return outcome.result.rungs if outcome.status == TrialStatus.COMPLETED else []


@dataclass(frozen=True)
class RepeatJob:
    """One repeat: trial `number` measured again with another seed on its ladder up to the rung it reached,
    with the configs it ran (the search's stored space, its learning-rate schedule included)."""

    number: int
    request: TrialRequest

    @property
    def seed(self) -> int:
        return self.request.seed


def repeat_jobs(
    store: Store, name: str, space: SearchSpace, budget: Budget, settings: SearchSettings
) -> list[RepeatJob]:
    """The repeats the front at the target still lacks (`settings.repeat_seeds` more seeds per member)."""
    ladder = budget.ladder
    if settings.repeat_seeds < 1 or ladder.kind == "single":
        return []
    rungs = store.rungs(name)
    predictions = predict_search(rungs, ladder.target_flops)
    key, also = front_costs(settings.objectives)
    front = front_at_target(store.trials(name, statuses=[TrialStatus.COMPLETED]), predictions, key=key, also=also)
    stored = {(r.number, r.seed) for r in rungs}
    data, tickets = data_config(settings), DefineByRun(space, budget)
    todo = []
    for row in front:
        reached = ladder.trial_plan.up_to(predictions[row.number].rungs)
        ticket = tickets.ticket(row.number, {k: v for k, v in row.config.items() if k in space.sampled})
        for k in range(1, settings.repeat_seeds + 1):
            if (row.number, settings.seed + k) not in stored:
                planner = TrialPlanner(data, settings.seed + k, reached)
                todo.append(RepeatJob(row.number, planner.request(ticket, width_probe=False)))
    return todo


def repeat_front(store: Store, name: str, space: SearchSpace, budget: Budget, settings: SearchSettings) -> int:
    """Measure the front's members with `settings.repeat_seeds` more seeds; how many repeats ran."""
    todo = repeat_jobs(store, name, space, budget, settings)
    if not todo:
        return 0
    init_ray(settings)
    import ray

    task = ray.remote(num_cpus=1)(measure_again)
    refs = {task.remote(j.request): (j.number, j.seed) for j in todo}
    log.info("repeating %d front members with %d more seeds each", len({j.number for j in todo}), settings.repeat_seeds)
    for ref, (number, seed) in refs.items():
        try:
            records = ray.get(ref)
        except ray.exceptions.RayError as err:  # a lost repeat weakens the noise estimate; it never fails the search
            log.warning("repeat of trial %d with seed %d failed: %s", number, seed, str(err).splitlines()[0])
            continue
        for record in records:
            store.record_rung(name, number, record)
    return len(todo)
