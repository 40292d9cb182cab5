"""Run a search: create it, launch it, resume it. An Optuna study proposes (`study.py`), Ray Tune runs
the trials (`tune_runner.py`), the store keeps every result.

- Infeasible configs are not trained: the define-by-run space marks them with an Optuna constraint
  and the trainable returns at once with loss = inf. They do not count towards the requested trials:
  the search proposes again (in rounds of Tune), up to `PROPOSALS_PER_TRIAL` proposals per trial.
- A trial whose process dies is recorded `retrying` with its reason and retried by Tune up to
  `retries` times (each attempt is a row); a NaN never reaches Optuna (it would leave the trial
  RUNNING forever).
- Completed results are written by the driver the moment Tune hands them over (kept on local disk
  when the store stays unreachable past its retry window: `nas.search.spool`); `resume` writes what was
  kept, marks what the dead driver left running as `interrupted` and runs the trials still missing.
- A candidates search (`nas.space.candidates`) proposes exactly its candidates: each one without a final trial is
  enqueued in Optuna (`candidates_left`), one proposal each, an infeasible one included (it stays infeasible).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, replace

from workers.status import FINAL, TrialStatus

from ..space import CANDIDATE, SearchSpace, space_from_dict
from ..space.budget import Budget, stored_budget
from ..store import SearchStatus, Store
from ..version import code_version
from .extra_rungs import measure_anchors, measure_level
from .interrupt import SearchInterrupted, StoreOutage
from .ray_env import configure_ray_env
from .repeats import repeat_front
from .settings import PROPOSALS_PER_TRIAL, SearchSettings
from .spool import Spool
from .study import fail_stale_optuna_trials, new_study_name, optuna_storage
from .trainable import Worker

__all__ = [
    "SearchReport",
    "candidates_left",
    "create_search",
    "finished_trial_numbers",
    "launch_search",
    "resume_search",
    "stored_space",
]

log = logging.getLogger(__name__)

INTERRUPTED_REASON = "the search driver stopped before this trial finished"


@dataclass(frozen=True)
class SearchReport:
    name: str
    requested: int
    finished: int
    status: str


def finished_trial_numbers(store: Store, name: str) -> set[int]:
    """Trials that count towards the requested number: those with a final status (`workers.status.FINAL`) but
    infeasible. An infeasible proposal (one the budget cannot train, or that is implausible at the target) is
    recorded without training, and the search proposes again, up to `PROPOSALS_PER_TRIAL` per requested trial."""
    return {row.number for row in store.trials(name, statuses=FINAL - {TrialStatus.INFEASIBLE})}


def candidates_left(store: Store, name: str, space: SearchSpace) -> list[int]:
    """The candidates of a candidates search with no trial of a final status yet, in the file's order ([] for a
    sampled space)."""
    done = {row.config.get(CANDIDATE) for row in store.trials(name, statuses=FINAL)}
    return [i for i in range(len(space.candidates)) if i not in done]


def _rounds(store: Store, name: str, requested: int, budget: Budget, space: SearchSpace):
    """(trials still missing, proposals left, the candidates to enqueue, the budget with the time left) for each run
    of Tune: one normally, whose searcher stops proposing once enough trials that train are proposed; another only
    if some failed to start. Proposals: `PROPOSALS_PER_TRIAL` x requested in all, infeasible ones included; in a
    candidates search, one per candidate still missing."""
    start = time.monotonic()
    while True:
        enqueue = candidates_left(store, name, space)
        if space.candidates:
            missing = room = len(enqueue)
        else:
            missing = requested - len(finished_trial_numbers(store, name))
            room = PROPOSALS_PER_TRIAL * requested - len(store.trials(name))
        left = None if budget.max_search_seconds is None else budget.max_search_seconds - (time.monotonic() - start)
        if missing <= 0 or room <= 0 or (left is not None and left <= 0):
            return
        yield min(missing, room), room, enqueue, budget.model_copy(update={"max_search_seconds": left})


def launch_search(
    store: Store,
    name: str,
    space: SearchSpace,
    budget: Budget,
    settings: SearchSettings,
    show_progress: bool = True,
    worker: Worker | None = None,
) -> SearchReport:
    """Create search `name` (inputs already validated) and run all its trials (`worker`: what carries out each
    trial's request, `workers.trial.execute.run_request` unless a benchmark swaps in one that does no work)."""
    create_search(store, name, space, budget, settings)
    return _run_remaining(store, name, show_progress, worker=worker)


def create_search(store: Store, name: str, space: SearchSpace, budget: Budget, settings: SearchSettings) -> str:
    """Record search `name` with everything `resume` needs; returns its Optuna study's name."""
    study = new_study_name(name)
    store.create_search(
        name,
        requested_trials=budget.n_trials,
        budget=budget.model_dump(),
        space=space.model_dump(),
        settings=asdict(settings),
        optuna_study_name=study,
        code_version=code_version(),
    )
    return study


def resume_search(
    store: Store, name: str, show_progress: bool = True, ray_address: str | None = None, worker: Worker | None = None
) -> SearchReport:
    """Finish search `name`: what a dead driver left running is marked interrupted, the rest is run.

    It runs with the stored settings, except on `ray_address` when given (a restarted cluster).
    """
    row = store.get_search(name)
    written = Spool(store, name).replay()  # what an outage left on this disk, first
    if written:
        log.warning("resume %s: wrote %d results kept while the store was unreachable", name, written)
    marked = store.mark_running_trials(name, TrialStatus.INTERRUPTED, INTERRUPTED_REASON)
    stale = fail_stale_optuna_trials(optuna_storage(store.url), row.optuna_study_name)
    log.info("resume %s: %d interrupted trial rows, %d stale Optuna trials marked failed", name, marked, stale)
    return _run_remaining(store, name, show_progress, ray_address, worker)


def stored_space(raw: dict, budget: Budget) -> SearchSpace:
    """The space a search was stored with, its stored format brought up to date
    (`nas.store.migrations.upgrade_space`)."""
    from ..store.migrations import upgrade_space

    return space_from_dict(upgrade_space(raw, on_budget_ladder=budget.ladder.kind == "budget"))


def _run_remaining(
    store: Store, name: str, show_progress: bool, ray_address: str | None = None, worker: Worker | None = None
) -> SearchReport:
    row = store.get_search(name)
    budget = stored_budget(row.budget)
    space, settings = stored_space(row.space, budget), SearchSettings(**row.settings)
    if ray_address:
        settings = replace(settings, ray_address=ray_address)
    store.set_search_status(name, SearchStatus.RUNNING)
    try:
        for missing, room, enqueue, left in _rounds(store, name, row.requested_trials, budget, space):
            configure_ray_env()  # before Ray is imported, which happens only when a search really runs
            from .tune_runner import run_tuner

            extra = {"proposals": room, "candidates": enqueue} | ({} if worker is None else {"worker": worker})
            run_tuner(store, name, space, left, settings, row.optuna_study_name, missing, show_progress, **extra)
            # Tune is done: an Optuna trial still RUNNING belongs to no trial (an ask retried after its
            # first commit had landed), and samplers should not wait on it.
            fail_stale_optuna_trials(optuna_storage(store.url), row.optuna_study_name)
        # A retry Tune never started (its time budget ran out) is not left pending for ever.
        store.mark_running_trials(name, TrialStatus.INTERRUPTED, INTERRUPTED_REASON)
        if _done(store, name, row.requested_trials, space):
            repeat_front(store, name, space, budget, settings)
            measure_anchors(store, name, space, budget, settings)
            measure_level(store, name, space, budget, settings)
    except StoreOutage:
        # The store is down: nothing more can be written; `nas resume` replays the spool and goes on.
        raise
    except SearchInterrupted:
        # Trials Tune never started, and their Optuna trials, are closed too: the store is ready for resume.
        store.mark_running_trials(name, TrialStatus.INTERRUPTED, INTERRUPTED_REASON)
        fail_stale_optuna_trials(optuna_storage(store.url), row.optuna_study_name)
        store.set_search_status(name, SearchStatus.INTERRUPTED)
        raise
    except BaseException:
        store.set_search_status(name, SearchStatus.INTERRUPTED)
        raise
    finished = len(finished_trial_numbers(store, name))
    status = SearchStatus.COMPLETED if _done(store, name, row.requested_trials, space) else SearchStatus.INTERRUPTED
    if status == SearchStatus.COMPLETED and finished < row.requested_trials:
        log.warning(
            "search %s: %d of %d trials trained: %d proposals were infeasible (nas status %s says why)",
            name, finished, row.requested_trials, len(store.trials(name)) - finished, name,
        )  # fmt: skip
    store.set_search_status(name, status)
    return SearchReport(name, row.requested_trials, finished, status)


def _done(store: Store, name: str, requested: int, space: SearchSpace) -> bool:
    """Every requested trial trained, or every proposal the search may make made (every candidate proposed)."""
    if space.candidates:
        return not candidates_left(store, name, space)
    proposed = store.trials(name, statuses=FINAL)
    return len(finished_trial_numbers(store, name)) >= requested or len(proposed) >= PROPOSALS_PER_TRIAL * requested
