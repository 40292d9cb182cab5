"""Contracts with the private parts of Optuna and Ray Tune the project touches (nas/search/optuna_adapter.py,
nas/search/tune_adapter.py): each fails, naming the attribute, on a release that lacks one."""

import inspect

import optuna
from ray.tune.search.optuna import OptunaSearch

from nas.search import tune_adapter
from nas.search.optuna_adapter import CACHED_STORAGE_CALLS, missing_calls
from nas.search.study import RetryingRDBStorage


def test_optuna_has_every_private_storage_call_the_store_retries_and_its_cache_still_makes_them():
    assert missing_calls() == [], f"optuna {optuna.__version__} lacks RDBStorage.{missing_calls()}"
    cached = inspect.getsource(optuna.storages._cached_storage)
    unused = [name for name in CACHED_STORAGE_CALLS if f".{name}(" not in cached]
    assert unused == [], (
        f"optuna's _CachedStorage no longer calls {unused}: drop them from nas/search/optuna_adapter.py"
    )
    for name in CACHED_STORAGE_CALLS:  # and each is wrapped in the retries
        assert getattr(RetryingRDBStorage, name) is not getattr(optuna.storages.RDBStorage, name), name


def test_ray_tunes_optuna_searcher_keeps_the_attributes_the_search_reads():
    def space(trial):
        trial.suggest_float("x", 0.0, 1.0)

    searcher = OptunaSearch(space=space, metric=["a", "b"], mode=["min", "min"], seed=0)
    assert tune_adapter.missing_attributes(searcher) == [], (
        f"ray lacks OptunaSearch.{tune_adapter.missing_attributes(searcher)}"
    )
    searcher.suggest("t1")
    asked = tune_adapter.optuna_trials(searcher)
    assert set(asked) == {"t1"} and tune_adapter.optuna_study(searcher).trials[0].number == asked["t1"].number
    searcher.on_trial_complete("t1", {"a": 1.0, "b": 2.0})
    assert "t1" in tune_adapter.completed_trials(searcher) and isinstance(tune_adapter.study_name(searcher), str)
    assert tune_adapter.optuna_study(searcher).trials[0].values == [1.0, 2.0]
