"""Every private part of Optuna this project touches, in one place, each with why.

A study wraps its RDB storage in Optuna's `_CachedStorage`, which calls some `RDBStorage` methods directly
rather than through the public storage API. `nas.search.study.RetryingRDBStorage` retries every storage call while
the database is unreachable; unretried, these private ones would fail a search's next ask at once on a
database restart (`CACHED_STORAGE_CALLS`). `missing_calls()` names those an installed release lacks: the
storage refuses to be built without them (`nas.search.study`), and the contract test (tests/nas/test_adapters.py)
fails naming them. `pyproject.toml` bounds Optuna below its next major version.
"""

from __future__ import annotations

import optuna

__all__ = ["CACHED_STORAGE_CALLS", "missing_calls"]

CACHED_STORAGE_CALLS = {
    "_create_new_trial": "asking a trial (`Study.ask`)",
    "_set_trial_param": "setting each sampled parameter of a trial",
    "_get_best_trial_id": "the best trial, which samplers read",
    "_get_trials": "TPE's and NSGA-II's reads of past trials",
    "_get_stale_trial_ids": "heartbeat: trials left running by a dead process",
}


def missing_calls() -> list[str]:
    """The private `RDBStorage` methods of `CACHED_STORAGE_CALLS` the installed Optuna lacks."""
    return [name for name in CACHED_STORAGE_CALLS if not callable(getattr(optuna.storages.RDBStorage, name, None))]
