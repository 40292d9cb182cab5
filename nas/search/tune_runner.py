"""Ray Tune plumbing: start (or join) Ray, run the Tuner, and write every trial event to the store.

`StoreCallback` runs in the driver: a row per attempt is opened when Tune starts a trial and
closed when it completes or errors. A trial whose process dies is recorded `retrying` with the
error's last line while Tune has retries left (its next attempt reuses the row, attempt + 1), and
`failed` after the last one. Progress is a `rich` bar with live
counts of done, failed and running trials and the best loss so far.
"""

from __future__ import annotations

import logging
import math
import signal
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from ray import tune
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from workers.status import TrialStatus
from workers.trial.contract import TrialOutcome, split_config
from workers.trial.execute import not_trained, run_request
from workers.trial.result import TrialResult

from ..answer.rung_decision import PromotionRule
from ..space import SearchSpace
from ..space.budget import Budget
from ..store import Store, StoreError
from . import tune_adapter
from .early_stop import FlopBandStopper, TrialTimeLimit
from .interrupt import SearchInterrupted, StopRequest, StoreOutage, stop_signals
from .ray_env import init_ray, ray_results_dir, trial_resources
from .rung_gate import StoreRungGate
from .settings import SearchSettings, data_config
from .spool import Spool, StartedTrial, spooled_finish, spooled_start_and_finish, store_unreachable
from .study import DefineByRun, enqueue_candidates, make_sampler, optuna_storage
from .trainable import RUNG_DONE, TrialPlanner, Worker, metric_keys, outcome_of, progress_of, tune_trial

log = logging.getLogger(__name__)


def error_line(trial) -> str:
    """The last meaningful line of a Tune trial's error file (e.g. 'RayActorError: ... died')."""
    text = ""
    if getattr(trial, "error_file", None) and Path(trial.error_file).exists():
        text = Path(trial.error_file).read_text(errors="replace")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith(("File ", "  "))]
    return (lines[-1] if lines else "trial process failed (no error text)")[:500]


@dataclass
class Counts:
    done: int = 0
    failed: int = 0
    running: int = 0
    best: float = math.inf
    rows: dict = field(default_factory=dict)  # tune trial id -> store row id (a StartedTrial while the store is down)


class StoreCallback(tune.Callback):
    """Writes trial starts, results and failures to the store; drives the progress bar."""

    def __init__(
        self, store: Store, name: str, retries: int, progress: Progress | None, task, stop: StopRequest | None = None
    ) -> None:
        self.store, self.name, self.retries = store, name, retries
        self.progress, self.task, self.counts = progress, task, Counts()
        self.stop = stop or StopRequest(grace_s=0.0)
        self.spool = Spool(store, name)

    def __getstate__(self) -> dict:
        """Tune pickles its run config (for experiment restore): keep the store and the bar out of it."""
        return {**self.__dict__, "store": None, "progress": None, "task": None, "spool": None}

    def on_trial_start(self, iteration, trials, trial, **info):
        knobs, ticket = split_config(trial.config)
        started = StartedTrial(ticket.number, int(trial.num_failures), knobs, ticket.costs)
        try:
            self.counts.rows[trial.trial_id] = started.open_row(self.store, self.name)
        except StoreError as err:
            if not store_unreachable(err):
                raise
            self.stop.store_unreachable()  # its row is written with its result, from the spool
            self.counts.rows[trial.trial_id] = started
        self.counts.running += 1
        self._refresh()

    def on_trial_complete(self, iteration, trials, trial, **info):
        outcome = outcome_of(trial.last_result)
        if outcome is None and self.stop.requested:
            outcome = interrupted_outcome(trial, self.stop)
        if outcome is None:  # cut short (time limit, early stopping): never a partial loss on the front
            outcome = stopped_outcome(trial)
        self._close(trial, outcome.result)
        self.counts.done += 1
        if outcome.status == TrialStatus.COMPLETED:
            self.counts.best = min(self.counts.best, outcome.told_loss)
        self._refresh(advance=0 if outcome.status == TrialStatus.INFEASIBLE else 1)  # the bar counts trained

    def on_trial_recover(self, iteration, trials, trial, **info):
        """The attempt's process died and Tune will start it again: `retrying` until then."""
        self._close(trial, died(trial, TrialStatus.RETRYING))
        self.counts.failed += 1
        self._refresh()

    def on_trial_error(self, iteration, trials, trial, **info):
        self._close(trial, died(trial, TrialStatus.FAILED))
        self.counts.failed += 1
        self.counts.done += 1
        self._refresh(advance=1)

    def _close(self, trial, result: TrialResult) -> None:
        """Write the attempt's result; past the store's retry window, keep it in the spool and stop
        launching trials (`nas.search.spool`)."""
        row = self.counts.rows.pop(trial.trial_id, None)
        if row is None:
            if result.status == TrialStatus.FAILED:  # every attempt died before the trial started
                self._record_unstarted_failure(trial, result)
            return
        self.counts.running -= 1
        if isinstance(row, StartedTrial):  # started while the store was unreachable
            self.spool.append(spooled_start_and_finish(row, result))
            return
        try:
            self.store.finish_trial(row, result)
        except StoreError as err:
            if not store_unreachable(err):
                raise
            self.spool.append(spooled_finish(row, result))
            self.stop.store_unreachable()
            return
        if len(self.spool):  # the store takes writes again: what it could not take before follows
            self.spool.replay()

    def _record_unstarted_failure(self, trial, result: TrialResult) -> None:
        """A trial whose processes all died before it started still gets its row, `failed` with the reason:
        its row is the one an earlier attempt left waiting to retry, or a new one."""
        knobs, ticket = split_config(trial.config)
        waiting = [
            r.id for r in self.store.trials(self.name) if r.number == ticket.number and r.status == TrialStatus.RETRYING
        ]
        started = StartedTrial(ticket.number, int(trial.num_failures), knobs, ticket.costs)
        row = waiting[0] if waiting else started.open_row(self.store, self.name)
        self.store.finish_trial(row, result)

    def _refresh(self, advance: int = 0) -> None:
        if self.progress is not None:
            c = self.counts
            best = f"{c.best:.4f}" if math.isfinite(c.best) else "-"
            self.progress.update(
                self.task,
                advance=advance,
                description=f"done {c.done} | failed {c.failed} | running {c.running} | best loss at target {best}",
            )


def died(trial, status: TrialStatus) -> TrialResult:
    """The result of an attempt whose process died: `status` (retrying or failed), the error's last line."""
    return not_trained(split_config(trial.config)[1], status, error_line(trial)).result


def interrupted_outcome(trial, stop: StopRequest) -> TrialOutcome:
    """A trial the driver's signal ended before its last report: `interrupted`, never a loss on a front
    (its measured rungs are in the store already)."""
    reason = f"the search was stopped ({signal_name(stop.signum)}) before this trial finished"
    return not_trained(split_config(trial.config)[1], TrialStatus.INTERRUPTED, reason)


def stopped_outcome(trial) -> TrialOutcome:
    """A trial Tune's stoppers cut short (time limit, losing to its FLOP band): `stopped`, with the tokens and
    the curve point of its last progress report, and no loss."""
    point = progress_of(trial.last_result)
    where = f"at step {point.step} of {point.planned_steps}" if point is not None else "before its first report"
    reason = f"stopped {where} (time limit or losing to its FLOP band)"
    outcome = not_trained(split_config(trial.config)[1], TrialStatus.STOPPED, reason)
    if point is not None:
        outcome.result.tokens_seen, outcome.result.curve = point.tokens, [point]
    return outcome


def signal_name(signum: int | None) -> str:
    return signal.Signals(signum).name if signum is not None else "a signal"


class StoppableOptunaSearch(OptunaSearch):
    """Optuna's Tune searcher that proposes nothing once a stop is requested or `trained` trials that will train
    have been proposed (infeasible proposals, which train nothing, do not count), and tells Optuna FAIL for a
    trial the stop ended (samplers ignore it; `nas resume` runs a new trial in its place)."""

    def __init__(self, *args, stop: StopRequest, spool: Spool, trained: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.stop, self.spool, self.trained, self.proposed = stop, spool, trained, 0

    def suggest(self, trial_id: str):
        if self.stop.requested or (self.trained is not None and self.proposed >= self.trained):
            return Searcher.FINISHED
        try:
            config = super().suggest(trial_id)
        except Exception as err:
            if not store_unreachable(err):
                raise
            self.stop.store_unreachable()
            return Searcher.FINISHED
        if isinstance(config, dict) and not split_config(config)[1].infeasible_reason:
            self.proposed += 1
        return config

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
        """Tell Optuna the trial's objectives (FAIL without them).  Ray's own version logs and drops a
        failed tell, which would leave the trial RUNNING and `nas resume` would fail it: here a tell
        the storage refuses past its retry window is spooled instead (so this reads Ray's trial map, through
        `nas.search.tune_adapter`)."""
        if self.stop.requested and outcome_of(result) is None:
            result, error = None, True
        asked, told = tune_adapter.optuna_trials(self), tune_adapter.completed_trials(self)
        if trial_id in told or trial_id not in asked:
            return super().on_trial_complete(trial_id, result, error)
        values = [result.get(m) for m in self.metric] if result else None
        outcome = outcome_of(result)
        if values is not None and (any(v is None for v in values) or (outcome and outcome.status == "failed")):
            values = None  # a trial that crashed is FAIL in Optuna, as in the store
        state = optuna.trial.TrialState.COMPLETE if values is not None else optuna.trial.TrialState.FAIL
        number = asked[trial_id].number
        try:
            tune_adapter.optuna_study(self).tell(asked[trial_id], values, state=state)
        except Exception as err:
            if not store_unreachable(err):
                log.warning("optuna refused trial %d's result: %s", number, err)
            else:
                spooled = {"op": "optuna_tell", "study": tune_adapter.study_name(self), "number": number}
                self.spool.append({**spooled, "values": values})
                self.stop.store_unreachable()
        told.add(trial_id)


class StopOnRequest(tune.Stopper):
    """Ends a trial at its next rung once a signal asked for a stop, and every trial once the grace period
    is over or a second signal came (a store outage stops launching trials, never running ones)."""

    def __init__(self, request: StopRequest):
        self.request = request

    def __call__(self, trial_id: str, result: dict) -> bool:
        signalled = self.request.signum is not None  # a store outage lets running trials finish
        return signalled and (RUNG_DONE in result or self.request.grace_over())

    def stop_all(self) -> bool:
        return self.request.immediate or (self.request.signum is not None and self.request.grace_over())


def stoppers(budget: Budget, settings: SearchSettings, stop: StopRequest | None = None):
    """Per-trial time limit and FLOP-band early stopping as configured, and the driver's signals."""
    chosen = ([TrialTimeLimit(budget.max_trial_seconds)] if budget.max_trial_seconds else []) + (
        [FlopBandStopper()] if settings.early_stopping else []
    )
    chosen += [StopOnRequest(stop)] if stop is not None else []
    return tune.stopper.CombinedStopper(*chosen) if chosen else None


def trial_planner(store: Store, name: str, budget: Budget, settings: SearchSettings, study_name: str) -> TrialPlanner:
    """What every trial of the search shares (bound to Tune's trainable with `with_parameters`): the corpus, the
    seed, how trials are measured, and the rung gate (none for a single-budget search, which stores
    no rungs and tells the measured loss)."""
    ladder, gate = budget.ladder, None
    if ladder.kind != "single":  # the chosen layout's rungs: the top rung alone where a ladder saves nothing
        rule = PromotionRule(
            ladder.target_flops,
            ladder.layout.eta,
            ladder.layout.rungs,
            remeasure=ladder.is_replica,
            objectives=settings.objectives,
        )
        gate = StoreRungGate(store.url, name, rule, study_name)
    return TrialPlanner(data_config(settings), settings.seed, ladder.trial_plan, gate)


def run_tuner(
    store: Store,
    name: str,
    space: SearchSpace,
    budget: Budget,
    settings: SearchSettings,
    study_name: str,
    n_trials: int,
    show_progress: bool = True,
    worker: Worker = run_request,
    proposals: int | None = None,
    candidates: Sequence[int] = (),
) -> Counts:
    """Run `n_trials` more trials of search `name` that train, within `proposals` proposals in all (infeasible
    ones included; `n_trials` by default), and return the counts. In a candidates search, `candidates` are the ones
    to propose, in order (`nas.search.study.enqueue_candidates`).

    `worker(request, report, on_rung_done)` carries out each trial's request in its process
    (`workers.trial.execute.run_request`); benchmarks swap in one that does no work.
    """
    init_ray(settings)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not a line per study created or loaded
    # Ray times each define-by-run call and warns above 1 s: the first call builds the space's cached
    # shapes (a replica plan's shape-only models), which is work, not a misplaced training step.
    warnings.filterwarnings("ignore", message="Define-by-run function passed in the `space` argument took")
    stop = StopRequest(settings.stop_grace)
    spool = Spool(store, name)
    searcher = StoppableOptunaSearch(
        stop=stop,
        spool=spool,
        space=DefineByRun(space, budget),
        metric=metric_keys(settings.objectives),  # the study's directions: one "min" per objective
        mode=["min"] * len(settings.objectives),
        sampler=make_sampler(settings.sampler, settings.seed),
        study_name=study_name,
        storage=optuna_storage(store.url),
        trained=n_trials,
    )
    if candidates:
        enqueue_candidates(optuna_storage(store.url), study_name, list(candidates))
    planner = trial_planner(store, name, budget, settings, study_name)
    trainable = tune.with_resources(
        tune.with_parameters(tune_trial, planner=planner, worker=worker), trial_resources(settings)
    )
    with _progress(show_progress, n_trials) as (progress, task), stop_signals(stop):
        callback = StoreCallback(store, name, settings.retries, progress, task, stop)
        tuner = tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                search_alg=searcher,
                num_samples=max(n_trials, proposals or 0),
                max_concurrent_trials=settings.workers,
                reuse_actors=True,
                time_budget_s=budget.max_search_seconds,
            ),
            run_config=tune.RunConfig(
                name=f"{name}-{study_name[-8:]}",
                storage_path=ray_results_dir(settings, store.url),
                verbose=0,
                callbacks=[callback],
                failure_config=tune.FailureConfig(max_failures=settings.retries),
                stop=stoppers(budget, settings, stop),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            ),
        )
        tuner.fit()
    if stop.outage:
        kept = len(spool) - spool.replay()  # the store may be back by now
        raise StoreOutage(kept, str(spool.path), store.retry_seconds)
    if stop.requested:
        raise SearchInterrupted(stop.signum or signal.SIGINT)
    return callback.counts


class _progress:
    """A rich progress bar over trials (or nothing), as a context manager yielding (progress, task)."""

    def __init__(self, show: bool, total: int):
        self.show, self.total, self.progress = show, total, None

    def __enter__(self):
        if not self.show:
            return None, None
        self.progress = Progress(
            TextColumn("[bold]trials"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
        )
        self.progress.start()
        return self.progress, self.progress.add_task("starting Ray", total=self.total)

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.stop()
        return False
