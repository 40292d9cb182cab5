"""Every private part of Ray Tune this project touches, in one place, each with why.

`StoppableOptunaSearch` (`nas.search.tune_runner`) tells Optuna a trial's result itself, so that a tell the storage
refuses past its retry window is spooled (Ray's `OptunaSearch.on_trial_complete` logs and drops it, leaving the
Optuna trial RUNNING). That needs the searcher's own bookkeeping, which Ray keeps in private attributes
(`OPTUNA_SEARCH_ATTRIBUTES`). `missing_attributes(searcher)` names those a constructed searcher lacks; the
contract test (tests/nas/test_adapters.py) fails on a Ray release that renames one. `pyproject.toml` bounds
Ray below its next major version.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "OPTUNA_SEARCH_ATTRIBUTES",
    "completed_trials",
    "missing_attributes",
    "optuna_study",
    "optuna_trials",
    "study_name",
]

OPTUNA_SEARCH_ATTRIBUTES = {
    "_ot_trials": "Tune trial id -> the Optuna trial asked for it: the trial to tell",
    "_completed_trials": "Tune trial ids already told: a second completion is ignored, as Ray does",
    "_ot_study": "the Optuna study the searcher asks and tells",
    "_study_name": "the study's name, kept with a spooled tell so `nas resume` can make it",
}


def optuna_trials(searcher: Any) -> dict[str, Any]:
    return searcher._ot_trials


def completed_trials(searcher: Any) -> set[str]:
    return searcher._completed_trials


def optuna_study(searcher: Any) -> Any:
    return searcher._ot_study


def study_name(searcher: Any) -> str:
    return searcher._study_name


def missing_attributes(searcher: Any) -> list[str]:
    """The private attributes of `OPTUNA_SEARCH_ATTRIBUTES` that `searcher` (set up with its space) lacks."""
    return [name for name in OPTUNA_SEARCH_ATTRIBUTES if not hasattr(searcher, name)]
