"""The store's plain rows and errors: what `Store` returns and raises (never an ORM object).

`SearchRow`, `TrialRow`, `RungRow` and `CurvePointRow` mirror the columns of `schema.py`; `SearchSummary` is one
line of `Store.list_searches`. Every `StoreError` message is one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from workers.status import TrialStatus

from .schema import SearchStatus


class StoreError(Exception):
    """A store operation failed; the message is one line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class UnknownSearch(StoreError):
    """No search has that name."""


class SearchExists(StoreError):
    """A search with that name already exists."""


class UnknownTrial(StoreError):
    """No trial has that id."""


@dataclass(frozen=True)
class SearchRow:
    id: int
    name: str
    status: SearchStatus
    created_at: datetime
    updated_at: datetime
    requested_trials: int
    budget: dict
    space: dict
    settings: dict
    optuna_study_name: str | None
    code_version: str | None


@dataclass(frozen=True)
class SearchSummary:
    name: str
    status: str
    created_at: datetime
    requested_trials: int
    completed: int
    failed: int
    running: int  # running, or retrying (an attempt is about to start again)
    other: int  # diverged, stopped, infeasible
    interrupted: int  # left running by a dead driver (replaced on resume)
    best_val_loss: float | None  # among completed trials (nats per token)
    best_val_bpb: float | None = None  # among completed trials (bits per byte: comparable across tokenizers)


@dataclass(frozen=True)
class TrialRow:
    id: int
    search_id: int
    number: int
    attempt: int
    optuna_trial_number: int | None
    status: TrialStatus
    failure_reason: str | None
    previous_attempts: list  # [{"attempt", "status", "failure_reason"}] of earlier tries
    config: dict
    started_at: datetime
    finished_at: datetime | None
    residual: str | None
    n_layers: int | None
    d_model: int | None
    n_heads: int | None
    mod_rate: float | None
    val_loss: float | None
    val_bpb: float | None
    nominal_flops_per_token: float | None
    executed_flops_per_token: float | None
    realised_flops_per_token: float | None
    budget_flops: float | None
    training_flops: float | None
    tokens_seen: int | None
    planned_tokens: int | None
    steps: int | None
    wall_time_s: float | None
    tokens_per_s: float | None
    step_time_share: float | None
    peak_memory_mb: float | None
    seed: int | None
    branch_flops: float | None
    kv_bytes_per_token: float | None = None  # counted at seq_len (`nas.space.objectives`); None in older stores
    decode_flops_per_token: float | None = None


@dataclass(frozen=True)
class RungRow:
    """One measured rung of a trial (with the trial's family and executed FLOPs per token, for fits)."""

    number: int
    rung: int
    seed: int
    budget_flops: float
    steps: int
    tokens: int
    val_loss: float | None
    training_flops: float
    train_seconds: float | None
    d_model: int | None  # the replica's width, parameters and tokens per parameter (None on a budget ladder)
    params: int | None
    tokens_per_param: float | None
    target_tokens_per_param: float | None
    on_path: bool | None
    residual: str | None
    executed_flops_per_token: float | None
    kv_bytes_per_token: float | None = None  # the trial's, stored when it started (`nas.space.objectives`)

    @property
    def is_replica(self) -> bool:
        """Whether this rung trained a replica of the trial (a narrower copy on the target's path), not the config
        itself on a budget ladder."""
        return self.d_model is not None


@dataclass(frozen=True)
class CurvePointRow:
    """One stored point of a trial's loss curve (`val_loss` only where the trainer validated)."""

    step: int
    tokens: int
    train_loss: float | None
    val_loss: float | None
    training_flops: float
