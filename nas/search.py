"""Run a search: an Optuna study proposes, Ray Tune runs the trials, the store keeps every result.

The Optuna study lives in the store's own database (Optuna's RDB storage), so optuna-dashboard
can open it too. Ray Tune's `OptunaSearch` is the bridge (the only Tune searcher that handles
several objectives): both objectives are minimised, `val_loss` and `executed_flops_per_token`.

- Infeasible configs (invalid head split, or a budget that cannot pay for one step) are not
  trained: the define-by-run space marks them with an Optuna constraint and the trainable
  returns at once with loss = inf.
- A trial whose process dies is recorded `failed` with its reason and retried by Tune up to
  `retries` times (each attempt is a row); a NaN never reaches Optuna (it would leave the trial
  RUNNING forever).
- Completed results are written by the driver the moment Tune hands them over; `resume` marks
  what the dead driver left running as interrupted and runs the trials still missing.
"""

from __future__ import annotations

import logging
import math
import os
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import optuna
from pydantic import ValidationError

from search_spaces.residual_lm import config_error_message, flops_per_token
from workers.data import DataConfig

from .budget import Budget, trial_is_feasible
from .space import SearchSpace, space_from_dict, suggest, to_configs
from .store import Store, schema_lock

log = logging.getLogger(__name__)

SAMPLERS = ("tpe", "nsga2", "random", "gp")
INTERRUPTED = "interrupted: the search driver stopped before this trial finished"
RETRYING = "(retrying: attempt"  # marks a failed attempt that Tune retries (tune_runner.StoreCallback)
FINAL_STATUSES = ("completed", "diverged", "infeasible", "stopped", "failed")


@dataclass(frozen=True)
class SearchSettings:
    """How a search runs (stored with it, so `resume` runs it the same way)."""

    workers: int = 2
    sampler: str = "tpe"
    seed: int = 0
    retries: int = 1
    ray_address: str | None = None
    gpus_per_trial: float | None = None  # None: the cluster's GPUs shared among workers; 0: CPU only
    data: dict | None = None  # DataConfig fields; None = the shipped corpus
    ray_dir: str | None = None  # Tune's storage_path (shared by all nodes on a cluster)
    early_stopping: bool = False  # stop losers within FLOP bands (nas.early_stop)


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    """TPE (multivariate) by default; NSGA-II, random and GP selectable; all seeded.

    Infeasible trials carry an Optuna constraint (`Trial.set_constraint`, set by `DefineByRun`),
    which the constrained samplers read from the trial itself.
    """
    if name == "tpe":
        return optuna.samplers.TPESampler(multivariate=True, seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    raise ValueError(f"--sampler: unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")


class DefineByRun:
    """The function OptunaSearch calls with each new trial: sample, then mark infeasible configs.

    A class rather than a closure: Tune pickles the searcher (and with it this space) when it
    checkpoints the experiment.
    """

    def __init__(self, space: SearchSpace, budget: Budget):
        self.space, self.budget = space, budget

    def __call__(self, trial) -> dict:
        params = suggest(self.space, trial)
        ot_trial = getattr(trial, "ot_trial", trial)  # Ray wraps the Optuna trial in a captor
        extra = {"optuna_number": ot_trial.number, "executed_flops_per_token": math.inf}
        try:
            arch, _, run = to_configs(self.space, params)
        except ValidationError as err:
            extra["infeasible_reason"] = config_error_message(err)
        else:
            extra["executed_flops_per_token"] = flops_per_token(arch).executed
            extra["infeasible_reason"] = trial_is_feasible(arch, self.budget, run.batch_size)
        ot_trial.set_constraint("infeasible", 1.0 if extra["infeasible_reason"] else 0.0)
        return extra


def optuna_storage(url: str) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage on the store's database (`Store.url`, password included).

    SQLite waits for locks instead of failing; elsewhere pooled connections are pinged before use.
    Optuna creates its tables on first use: under the store's schema lock, since two drivers doing
    it at once on a fresh database collide.
    """
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    with schema_lock(url):
        return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)


def fail_stale_optuna_trials(storage: optuna.storages.RDBStorage, study_name: str) -> int:
    """Trials a dead driver left RUNNING in Optuna become FAIL (samplers then ignore them)."""
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        return 0
    stale = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.RUNNING]
    for t in stale:
        storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
    return len(stale)


def finished_trial_numbers(store: Store, name: str) -> set[int]:
    """Trials that count towards the requested number: final and not interrupted by a dead driver."""
    def counts(row) -> bool:
        reason = row.failure_reason or ""
        being_retried = row.status == "failed" and RETRYING in reason
        return row.status in FINAL_STATUSES and not reason.startswith(INTERRUPTED) and not being_retried

    return {row.number for row in store.trials(name) if counts(row)}


def data_config(settings: SearchSettings) -> DataConfig:
    return DataConfig(**(settings.data or {}))


def new_study_name(search_name: str) -> str:
    return f"resnas-{search_name}-{uuid.uuid4().hex[:8]}"


def ray_results_dir(settings: SearchSettings, store_url: str) -> str:
    """Tune's storage_path: settings.ray_dir, else `.resnas/ray` beside a SQLite file or in the cwd."""
    if settings.ray_dir:
        return settings.ray_dir
    if store_url.startswith("sqlite:///"):
        return str(Path(store_url.removeprefix("sqlite:///")).resolve().parent / ".resnas" / "ray")
    return str(Path.cwd() / ".resnas" / "ray")


def local_ray_env() -> None:
    """Keep a local Ray on 127.0.0.1 and quiet (no usage stats, no dashboard)."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # Tune's legacy output honours verbose=0
    for noisy in ("tensorboardX", "ray.tune.logger"):  # progress reports carry +inf and nested records
        logging.getLogger(noisy).setLevel(logging.ERROR)


@dataclass(frozen=True)
class SearchReport:
    name: str
    requested: int
    finished: int
    status: str


def code_version() -> str:
    """The installed resnas version plus the git commit when run from a checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version("resnas")
    except PackageNotFoundError:
        ver = "unknown"
    head = Path(__file__).resolve().parents[1] / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        commit = (head.parent / ref.split(" ", 1)[1]).read_text().strip() if ref.startswith("ref:") else ref
        return f"{ver}+{commit[:12]}"
    except (OSError, IndexError):
        return ver


def launch_search(store: Store, name: str, space: SearchSpace, budget: Budget, settings: SearchSettings,
                  show_progress: bool = True) -> SearchReport:
    """Create search `name` (inputs already validated) and run all its trials."""
    create_search(store, name, space, budget, settings)
    return _run_remaining(store, name, show_progress)


def create_search(store: Store, name: str, space: SearchSpace, budget: Budget, settings: SearchSettings) -> str:
    """Record search `name` with everything `resume` needs; returns its Optuna study's name."""
    study = new_study_name(name)
    store.create_search(name, requested_trials=budget.n_trials, budget=budget.model_dump(),
                        space=space.model_dump(), settings=asdict(settings), optuna_study_name=study,
                        code_version=code_version())
    return study


def resume_search(store: Store, name: str, show_progress: bool = True, ray_address: str | None = None) -> SearchReport:
    """Finish search `name`: what a dead driver left running is marked interrupted, the rest is run.

    It runs with the stored settings, except on `ray_address` when given (a restarted cluster).
    """
    row = store.get_search(name)
    marked = store.fail_running_trials(name, INTERRUPTED)
    stale = fail_stale_optuna_trials(optuna_storage(store.url), row.optuna_study_name)
    log.info("resume %s: %d interrupted trial rows, %d stale Optuna trials marked failed", name, marked, stale)
    return _run_remaining(store, name, show_progress, ray_address)


def _run_remaining(store: Store, name: str, show_progress: bool, ray_address: str | None = None) -> SearchReport:
    from .tune_runner import run_tuner  # Ray is imported only when a search really runs

    row = store.get_search(name)
    space, budget, settings = space_from_dict(row.space), Budget(**row.budget), SearchSettings(**row.settings)
    if ray_address:
        settings = replace(settings, ray_address=ray_address)
    missing = row.requested_trials - len(finished_trial_numbers(store, name))
    store.set_search_status(name, "running")
    try:
        if missing > 0:
            run_tuner(store, name, space, budget, settings, row.optuna_study_name, missing, show_progress)
    except BaseException:
        store.set_search_status(name, "interrupted")
        raise
    finished = len(finished_trial_numbers(store, name))
    status = "completed" if finished >= row.requested_trials else "interrupted"
    store.set_search_status(name, status)
    return SearchReport(name, row.requested_trials, finished, status)
