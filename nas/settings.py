"""How a search runs: `SearchSettings`, stored with the search so that `nas resume` runs it the same way."""

from __future__ import annotations

from dataclasses import dataclass

from workers.data import DataConfig

__all__ = ["SearchSettings", "data_config"]


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
    repeat_seeds: int = 1  # more seeds for each member of the front at the target (nas.repeats)


def data_config(settings: SearchSettings) -> DataConfig:
    """The corpus the search's trials train on."""
    return DataConfig(**(settings.data or {}))
