"""How a search runs: `SearchSettings`, stored with the search so that `nas resume` runs it the same way.

`SearchSettings` is the one place these values are checked: constructing it raises pydantic's
`ValidationError`, whose entries are located by field name (the CLI option without its `--`), so
`nas.space.messages.options_message` words them as one line, e.g. `--workers: must be >= 1 (got 0)`.
It is a pydantic dataclass: `dataclasses.asdict` gives the stored dict, and `dataclasses.replace`
validates the changed copy again.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import ConfigDict, Field, field_validator
from pydantic.dataclasses import dataclass

from workers.data.config import DataConfig

from ..space.objectives import DEFAULT_OBJECTIVES, Objective, parse_objectives

__all__ = ["PROPOSALS_PER_TRIAL", "SAMPLERS", "Sampler", "SearchSettings", "data_config"]

Sampler = Literal["tpe", "nsga2", "random", "gp"]
SAMPLERS: tuple[str, ...] = get_args(Sampler)
PROPOSALS_PER_TRIAL = 10  # proposals (infeasible ones included) a search may make per requested trial


@dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class SearchSettings:
    """How a search runs (stored with it, so `resume` runs it the same way)."""

    workers: int = Field(2, ge=1, description="trials run in parallel")
    sampler: Sampler = Field("tpe", description="the Optuna sampler that proposes trials")
    seed: int = Field(0, ge=0, lt=2**32, description="seed of the sampler and of every trial")  # numpy's seed range
    retries: int = Field(1, ge=0, description="retries of a trial whose process dies")
    ray_address: str | None = Field(None, description="the Ray cluster to join; None starts a local one")
    gpus_per_trial: float | None = Field(
        None,
        ge=0,
        allow_inf_nan=False,
        description="GPU share per trial, e.g. 0.25; None: the cluster's GPUs shared among workers; 0: CPU only",
    )
    data: dict | None = Field(None, description="DataConfig fields; None: the shipped corpus")
    corpus: dict | None = Field(None, description="the corpus as loaded: TokenizedCorpus.summary()")
    pad_vocab: int = Field(1, ge=1, le=4096, description="the model's vocabulary is padded to a multiple of this")
    ray_dir: str | None = Field(None, description="Tune's storage_path (shared by all nodes on a cluster)")
    early_stopping: bool = Field(False, description="stop losers within FLOP bands (nas.search.early_stop)")
    repeat_seeds: int = Field(
        1, ge=0, le=8, description="more seeds for each member of the front at the target (nas.search.repeats)"
    )
    stop_grace: float = Field(
        120.0,
        ge=0,
        allow_inf_nan=False,
        description="seconds running trials get, after a first Ctrl-C or SIGTERM, to reach their next rung",
    )
    objectives: tuple[Objective, ...] = Field(
        DEFAULT_OBJECTIVES,
        description="what the search minimises: loss,flops or loss,flops,kv (nas.space.objectives)",
    )

    @field_validator("objectives", mode="before")
    @classmethod
    def _objectives(cls, value):
        """`loss,flops,kv` from the command line, a list from the store: one of the accepted sets."""
        return parse_objectives(value)


def data_config(settings: SearchSettings) -> DataConfig:
    """The corpus the search's trials train on."""
    return DataConfig(**(settings.data or {}))
