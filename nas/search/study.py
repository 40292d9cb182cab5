"""The Optuna side of a search: samplers, the define-by-run space, the RDB storage, stale-trial repair.

The Optuna study lives in the store's own database (Optuna's RDB storage), so optuna-dashboard
can open it too. Its objectives, all minimised, are the search's (`SearchSettings.objectives`):
`target_loss` (the loss predicted at the search's target budget; nas.answer.target) and
`executed_flops_per_token`, and `kv_bytes_per_token` when the search chose `loss,flops,kv`.
`DefineByRun` samples the knobs and computes each config's `TrialTicket` (its number, its typed configs, its
counted costs, stored with the trial when it starts, and why it will not be trained, if so); a candidates search
samples which candidate, from the ones `enqueue_candidates` handed Optuna; infeasible
configs (an invalid head split, a budget that cannot pay for one step) are marked with an Optuna
constraint and never trained.
"""

from __future__ import annotations

import functools
import math
import uuid

import optuna
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from search_spaces.residual_lm import config_error_message, flops_per_token
from workers.trial.contract import TICKET_KEY, CountedCosts, TrialConfigs, TrialTicket

from ..space import CANDIDATE, SearchSpace, suggest, to_configs
from ..space.budget import Budget, trial_is_feasible
from ..space.objectives import inference_cost
from ..store import call_with_retries, retry_window, schema_lock
from .optuna_adapter import CACHED_STORAGE_CALLS, missing_calls
from .settings import SAMPLERS

__all__ = [
    "SAMPLERS",
    "DefineByRun",
    "enqueue_candidates",
    "fail_stale_optuna_trials",
    "make_sampler",
    "new_study_name",
    "optuna_storage",
]


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
        """Sample the knobs (Ray's captor records them as the trial's config) and return the ticket beside them (and,
        in a candidates search, the candidate's knobs, which its config then shows)."""
        params = suggest(self.space, trial)
        ot_trial = getattr(trial, "ot_trial", trial)  # Ray wraps the Optuna trial in a captor
        ticket = self.ticket(ot_trial.number, params)
        ot_trial.set_constraint("infeasible", 1.0 if ticket.infeasible_reason else 0.0)
        knobs = self.space.candidates[params[CANDIDATE]] if self.space.candidates else {}
        return {**knobs, TICKET_KEY: ticket}

    def ticket(self, number: int, params: dict) -> TrialTicket:
        """What the search computes about sampled `params`: their typed configs, their counted costs (FLOPs per
        token, and KV-cache bytes and decode FLOPs per token at the config's seq_len: stored when the trial
        starts) and why they will not be trained."""
        try:
            arch, optim, run = to_configs(self.space, params)
        except ValidationError as err:
            return TrialTicket(number, CountedCosts(math.inf), None, config_error_message(err))
        reason = trial_is_feasible(arch, self.budget, run.batch_size)
        cost = inference_cost(arch)
        kv, decode = (None, None) if cost is None else (cost.kv_bytes_per_token, cost.decode_flops_per_token)
        costs = CountedCosts(flops_per_token(arch).executed, kv, decode)
        return TrialTicket(number, costs, TrialConfigs(arch, optim, run), reason)


def optuna_storage(url: str) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage on the store's database (`Store.url`, password included).

    SQLite waits for locks instead of failing; elsewhere pooled connections are pinged before use.
    Optuna creates its tables on first use: under the store's schema lock, since two drivers doing
    it at once on a fresh database collide.
    """
    if missing := missing_calls():
        raise RuntimeError(
            f"optuna {optuna.__version__} lacks RDBStorage.{', '.join(missing)}, which resnas retries while the "
            "database is unreachable (nas/search/optuna_adapter.py): install the optuna version pyproject.toml names"
        )
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    with schema_lock(url):
        return RetryingRDBStorage(url, engine_kwargs=kwargs)


class RetryingRDBStorage(optuna.storages.RDBStorage):
    """Optuna's RDB storage whose every storage call is retried while the database is unreachable, as
    the store's own writes are (`nas.store.call_with_retries`, for $RESNAS_STORE_RETRY_SECONDS).

    Optuna turns a failed commit into `StorageInternalError` from the SQLAlchemy error; a read that
    fails raises the SQLAlchemy error itself. Both are retried only on connection-class errors.
    """


def _database_error(err: BaseException) -> BaseException | None:
    if isinstance(err, optuna.exceptions.StorageInternalError):
        return err.__cause__
    return err if isinstance(err, SQLAlchemyError) else None


def _retrying(name: str, call):
    @functools.wraps(call)
    def run(self, *args, **kwargs):
        return call_with_retries(
            lambda: call(self, *args, **kwargs),
            window=retry_window(),
            where="(Optuna)",
            what=f"optuna {name}",
            cause=_database_error,
        )

    return run


for _name in dir(optuna.storages.BaseStorage):  # the storage API: every public method
    if not _name.startswith("_") and _name not in ("remove_session", "check_trial_is_updatable"):
        setattr(RetryingRDBStorage, _name, _retrying(_name, getattr(optuna.storages.RDBStorage, _name)))
for _name in set(CACHED_STORAGE_CALLS) - set(missing_calls()):  # the private calls: `nas.search.optuna_adapter`
    setattr(RetryingRDBStorage, _name, _retrying(_name, getattr(optuna.storages.RDBStorage, _name)))


def fail_stale_optuna_trials(storage: optuna.storages.RDBStorage, study_name: str) -> int:
    """Trials a dead driver left RUNNING in Optuna become FAIL (samplers then ignore them)."""
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        return 0
    stale = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.RUNNING]
    study_id = storage.get_study_id_from_name(study_name)
    for t in stale:
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
        storage.set_trial_state_values(trial_id, optuna.trial.TrialState.FAIL)
    return len(stale)


def enqueue_candidates(storage: optuna.storages.RDBStorage, study_name: str, indices: list[int]) -> int:
    """Hand Optuna the candidates `indices` of a candidates search to propose next, in that order
    (`Study.enqueue_trial`: the define-by-run's `suggest` then returns each one's index); one already waiting from an
    earlier run is not enqueued twice. How many were enqueued."""
    study = optuna.load_study(study_name=study_name, storage=storage)
    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    queued = {t.user_attrs.get(CANDIDATE) for t in waiting}
    todo = [i for i in indices if i not in queued]
    for index in todo:
        study.enqueue_trial({CANDIDATE: index}, user_attrs={CANDIDATE: index})
    return len(todo)


def new_study_name(search_name: str) -> str:
    return f"resnas-{search_name}-{uuid.uuid4().hex[:8]}"
