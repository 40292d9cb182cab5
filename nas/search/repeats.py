"""Noise: each member of the front at the target is measured again with more seeds.

After the search's trials, every trial on the front at the target of the search's own answer
(`front_to_repeat`: the answer `nas show` gives, its bias taken out; the fidelity benchmark's replay calls the same
function) is trained again with `repeat_seeds` more seeds (seed + 1, seed + 2, ...), on the same ladder (replicas
or budget rungs) up to the rung it reached, with the configs it ran (the search's learning-rate schedule included), as
Ray tasks of one CPU each. Their rungs are stored like any other (`Store.record_rung`, keyed by seed),
so the answer averages the seeds, and the seed-to-seed spread (`nas.answer.extrapolate.seed_noise`) is the seed
noise every band and call of the answer reads (`nas.answer.error_model`). A repeat already
stored is not run again (`nas resume` finishes the rest).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from workers.status import TrialStatus
from workers.training.records import RungRecord
from workers.trial.contract import TrialRequest
from workers.trial.execute import run_request

from ..answer.forecast import forecast_at_target
from ..answer.target import Answer, front_at_target
from ..space import SearchSpace
from ..space.budget import Budget
from ..space.objectives import DEFAULT_OBJECTIVES, Objective, front_costs
from ..store import Store, TrialRow
from .ray_env import init_ray
from .settings import SearchSettings, data_config
from .study import DefineByRun
from .trainable import TrialPlanner

__all__ = ["RepeatJob", "front_to_repeat", "measure_again", "repeat_front", "repeat_jobs"]

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


def front_to_repeat(
    answer: Answer, trials: Sequence[TrialRow], objectives: tuple[Objective, ...] = DEFAULT_OBJECTIVES
) -> list[int]:
    """The trials to measure again: the front at the target of `answer` among the completed `trials`, on the
    search's objectives (by cost)."""
    key, also = front_costs(objectives)
    completed = [t for t in trials if str(t.status) == TrialStatus.COMPLETED]
    return [row.number for row in front_at_target(completed, answer.predictions, key=key, also=also)]


def repeat_jobs(
    store: Store, name: str, space: SearchSpace, budget: Budget, settings: SearchSettings
) -> list[RepeatJob]:
    """The repeats the front at the target still lacks (`settings.repeat_seeds` more seeds per member)."""
    ladder = budget.ladder
    if settings.repeat_seeds < 1 or ladder.kind == "single":
        return []
    from ..search_answer import search_forecasting

    rungs, trials = store.rungs(name), store.trials(name, statuses=[TrialStatus.COMPLETED])
    answer = forecast_at_target(rungs, ladder.target_flops, search_forecasting(space, budget, trials))
    stored = {(r.number, r.seed) for r in rungs}
    by_number = {t.number: t for t in trials}
    data, tickets = data_config(settings), DefineByRun(space, budget)
    todo = []
    for number in front_to_repeat(answer, trials, settings.objectives):
        row = by_number[number]
        reached = ladder.trial_plan.up_to(answer.predictions[row.number].rungs)
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
