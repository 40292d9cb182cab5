"""Noise: each member of the front at the target is measured again with more seeds.

After the search's trials, every trial on the front at the target (`nas.answer`) is trained again
with `repeat_seeds` more seeds (seed + 1, seed + 2, ...), on the same ladder (replicas or budget rungs)
up to the rung it reached, with the configs it ran (the search's learning-rate schedule included), as
Ray tasks of one CPU each. Their rungs are stored like any other (`Store.record_rung`, keyed by seed),
so the answer averages the seeds, and the seed-to-seed spread (`nas.extrapolate.seed_noise`) is what
`nas show` marks as tied: configs whose predicted losses differ by less than twice it. A repeat already
stored is not run again (`nas resume` finishes the rest).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from search_spaces.residual_lm import ArchConfig
from workers.plans import LadderConfig
from workers.replica import DEFAULT_MIN_WIDTH, run_replica_trial, rung_budgets
from workers.status import TrialStatus
from workers.train import OptimConfig, RunConfig
from workers.trial import run_trial

from .answer import front_at_target, predict_search
from .budget import Budget
from .ray_env import init_ray
from .settings import SearchSettings, data_config
from .spec import SearchSpace, to_configs
from .store import Store

__all__ = ["RepeatJob", "repeat_front", "repeat_jobs"]

log = logging.getLogger(__name__)


def _measure_again(
    arch,
    optim,
    run,
    top_flops: float,
    ladder: LadderConfig,
    seed: int,
    data: dict,
    target_flops: float | None,
    min_width: int = DEFAULT_MIN_WIDTH,
) -> list[dict]:
    """One repeat in a Ray task: the trial's ladder up to its top reached rung, with another seed (its
    replicas, one run per rung, when `target_flops` is given; else its budget ladder)."""
    import torch

    from workers.data import load_corpus
    from workers.data_config import DataConfig

    torch.set_num_threads(1)
    corpus = load_corpus(DataConfig(**data))
    if target_flops is not None:
        lowest = top_flops / ladder.eta ** (ladder.rungs - 1)
        budgets = rung_budgets(lowest, ladder)
        result = run_replica_trial(
            arch, target_flops, budgets, corpus, seed, optim=optim, run=run, width_probe=False, min_width=min_width
        )
    else:
        result = run_trial(arch, top_flops, corpus, seed=seed, optim=optim, run=run, width_probe=False, ladder=ladder)
    return result.rungs if result.status == TrialStatus.COMPLETED else []


@dataclass(frozen=True)
class RepeatJob:
    """One repeat: trial `number` measured again with `seed` on `ladder` (its rungs up to the one it reached),
    with the configs it ran: the search's stored space, its learning-rate schedule included."""

    number: int
    seed: int
    arch: ArchConfig
    optim: OptimConfig
    run: RunConfig
    top_flops: float
    ladder: LadderConfig


def repeat_jobs(
    store: Store, name: str, space: SearchSpace, budget: Budget, settings: SearchSettings
) -> list[RepeatJob]:
    """The repeats the front at the target still lacks (`settings.repeat_seeds` more seeds per member)."""
    if settings.repeat_seeds < 1 or budget.rungs < 2:
        return []
    rungs = store.rungs(name)
    predictions = predict_search(rungs, budget.target)
    front = front_at_target(store.trials(name, statuses=[TrialStatus.COMPLETED]), predictions)
    stored = {(r.number, r.seed) for r in rungs}
    todo = []
    for row in front:
        reached = predictions[row.number].rungs
        arch, optim, run = to_configs(space, {k: v for k, v in row.config.items() if k in space.params})
        top = budget.trial_flops * budget.eta ** (reached - 1)
        for k in range(1, settings.repeat_seeds + 1):
            if (row.number, settings.seed + k) not in stored:
                ladder = LadderConfig(rungs=reached, eta=budget.eta)
                todo.append(RepeatJob(row.number, settings.seed + k, arch, optim, run, top, ladder))
    return todo


def repeat_front(store: Store, name: str, space: SearchSpace, budget: Budget, settings: SearchSettings) -> int:
    """Measure the front's members with `settings.repeat_seeds` more seeds; how many repeats ran."""
    todo = repeat_jobs(store, name, space, budget, settings)
    if not todo:
        return 0
    init_ray(settings)
    import ray

    task = ray.remote(num_cpus=1)(_measure_again)
    data = data_config(settings).model_dump()
    target = budget.target if budget.ladder == "replica" else None
    refs = {
        task.remote(j.arch, j.optim, j.run, j.top_flops, j.ladder, j.seed, data, target, budget.min_replica_width): (
            j.number,
            j.seed,
        )
        for j in todo
    }
    log.info("repeating %d front members with %d more seeds each", len({j.number for j in todo}), settings.repeat_seeds)
    for ref, (number, seed) in refs.items():
        try:
            results = ray.get(ref)
        except ray.exceptions.RayError as err:  # a lost repeat weakens the noise estimate; it never fails the search
            log.warning("repeat of trial %d with seed %d failed: %s", number, seed, str(err).splitlines()[0])
            continue
        for result in results:
            store.record_rung(name, number, seed, result)
    return len(todo)
