"""The store's tables, as SQLAlchemy 2 ORM classes and nothing else (queries live in `reads.py` and `writes.py`).

Types are portable: every float column is double precision (`Double`: REAL on SQLite, DOUBLE
PRECISION on PostgreSQL), so +/-inf round-trips on both; NaN is written as NULL (SQLite would do
so silently anyway). JSON columns are sanitised on the way in (`sanitise_json`): non-finite floats
become null, because NaN/Infinity are not JSON and PostgreSQL rejects them. JSON is stored as text
on every backend (`json`, not JSONB), so documents come back exactly as written: key order, and
ints versus floats. Times are stored in UTC and read back timezone-aware.

Every table is prefixed `resnas_`: the Optuna study lives in the same database (so optuna-dashboard
can open it) and Optuna's RDB storage owns unprefixed names such as `studies` and `trials`.
"""

from __future__ import annotations

import math
from dataclasses import fields
from datetime import datetime, timezone
from enum import Enum
from typing import get_type_hints

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.types import TypeDecorator

from workers.status import TrialStatus
from workers.strict_json import sanitise_json
from workers.training.records import RungRecord
from workers.trial.contract import CountedCosts
from workers.trial.result import TrialResult, WidthCertificate


class SearchStatus(str, Enum):
    """A search's state: running, or how its driver last left it."""

    RUNNING = "running"
    COMPLETED = "completed"  # every requested trial finished
    INTERRUPTED = "interrupted"  # the driver stopped before that: `nas resume` finishes it
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


SEARCH_STATUSES = tuple(s.value for s in SearchStatus)
TRIAL_STATUSES = tuple(s.value for s in TrialStatus)


def scalar_fields(record: type, kind: type) -> tuple[str, ...]:
    """The fields of dataclass `record` annotated `kind` or `kind | None`, in order: its columns of that type."""
    hints = get_type_hints(record)
    return tuple(f.name for f in fields(record) if hints[f.name] in (kind, kind | None))


# The scalar fields of `TrialResult`, one column each on `trials`.
RESULT_FLOAT_FIELDS = scalar_fields(TrialResult, float)
RESULT_INT_FIELDS = scalar_fields(TrialResult, int)
# A config's counted costs (`CountedCosts`, `nas.space.objectives`): known, and stored, when a trial starts.
COST_FIELDS = tuple(f.name for f in fields(CountedCosts))
# Architecture fields copied out of the config for filtering.
ARCH_FIELDS = ("residual", "n_layers", "d_model", "n_heads", "mod_rate")
# `WidthCertificate`, one column each on `width_certificates`.
WIDTH_FIELDS = tuple(f.name for f in fields(WidthCertificate))
# The curve points' columns: a `CurvePoint`'s step, tokens, losses and FLOPs (its learning rate and validation
# index stay with the trial's process).
CURVE_FIELDS = ("step", "tokens", "train_loss", "val_loss", "training_flops")
# One rung of a trial (`RungRecord`), one column each on `rungs` beside the key (rung, seed); a budget-ladder rung
# leaves the replica's columns NULL.
RUNG_FIELDS = tuple(f.name for f in fields(RungRecord) if f.name not in ("rung", "seed"))


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class SafeJSON(TypeDecorator):
    """JSON whose values pass through `sanitise_json` before they are written.

    Plain `json` (text) on PostgreSQL too, not JSONB: JSONB reorders object keys and stores numbers
    as NUMERIC, so 1e16 would come back as the int 10000000000000000 and a dict of per-layer
    diagnostics in another order than on SQLite. Nothing queries inside these documents.
    """

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value, dialect):
        return sanitise_json(value)


class SafeFloat(TypeDecorator):
    """Double precision; +/-inf kept, NaN stored as NULL (SQLite would anyway; now PostgreSQL agrees)."""

    impl = Double
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is None:
            return None
        x = float(value)
        return None if math.isnan(x) else x

    def process_result_value(self, value, dialect):
        return None if value is None else float(value)


class UTCDateTime(TypeDecorator):
    """A timestamp stored in UTC; naive values are taken as UTC, results are always timezone-aware."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is None:
            return None
        value = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        value = value.astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value, dialect):
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


class StatusColumn(TypeDecorator):
    """A status enum stored as its plain text value (a CHECK constraint lists the values); read back
    as the enum, which compares equal to its text."""

    impl = String(16)
    cache_ok = True

    def __init__(self, enum: type[Enum]):
        super().__init__()
        self.enum = enum

    def process_bind_param(self, value, dialect):
        return None if value is None else self.enum(value).value

    def process_result_value(self, value, dialect):
        return None if value is None else self.enum(value)


def _one_of(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    pass


class SchemaVersionModel(Base):
    """A single row (id = 1): the schema version this database is at."""

    __tablename__ = "resnas_schema_version"
    __table_args__ = (CheckConstraint("id = 1", name="ck_schema_version_single_row"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)


class SearchModel(Base):
    """One architecture search (one Optuna study): what was asked for and how it stands."""

    __tablename__ = "resnas_searches"
    __table_args__ = (CheckConstraint(_one_of("status", SEARCH_STATUSES), name="ck_searches_status"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True, index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    status: Mapped[SearchStatus] = mapped_column(StatusColumn(SearchStatus), default=SearchStatus.RUNNING)
    requested_trials: Mapped[int] = mapped_column(Integer)
    budget: Mapped[dict] = mapped_column(SafeJSON)  # trial_flops, search_flops, wall limits...
    space: Mapped[dict] = mapped_column(SafeJSON)  # the search-space spec
    settings: Mapped[dict] = mapped_column(SafeJSON)  # sampler, seed, workers, retries...
    optuna_study_name: Mapped[str | None] = mapped_column(String(255))
    code_version: Mapped[str | None] = mapped_column(String(255))

    @classmethod
    def find(cls, session: Session, name: str) -> SearchModel | None:
        return session.scalars(select(cls).where(cls.name == name)).one_or_none()


class TrialModel(Base):
    """One proxy training run: its config, a few denormalised architecture fields, and its scalar results."""

    __tablename__ = "resnas_trials"
    __table_args__ = (
        UniqueConstraint("search_id", "number", name="uq_trials_search_number"),
        CheckConstraint(_one_of("status", TRIAL_STATUSES), name="ck_trials_status"),
        Index("ix_trials_search_status", "search_id", "status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    search_id: Mapped[int] = mapped_column(ForeignKey("resnas_searches.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)  # 0-based index within the search
    attempt: Mapped[int] = mapped_column(Integer, default=0)  # 0 first try, +1 per retry
    optuna_trial_number: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[TrialStatus] = mapped_column(StatusColumn(TrialStatus), default=TrialStatus.RUNNING)
    failure_reason: Mapped[str | None] = mapped_column(Text)
    previous_attempts: Mapped[list] = mapped_column(SafeJSON, default=list)  # [{attempt, status, failure_reason}]
    config: Mapped[dict] = mapped_column(SafeJSON)  # {"arch": {...}, "optim": {...}, ...}
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Denormalised from config["arch"] for filtering.
    residual: Mapped[str | None] = mapped_column(String(32))
    n_layers: Mapped[int | None] = mapped_column(Integer)
    d_model: Mapped[int | None] = mapped_column(Integer)
    n_heads: Mapped[int | None] = mapped_column(Integer)
    mod_rate: Mapped[float | None] = mapped_column(SafeFloat)
    # TrialResult scalars; NULL while running. val_loss = inf for trials that did not complete.
    val_loss: Mapped[float | None] = mapped_column(SafeFloat)  # nats per token
    val_bpb: Mapped[float | None] = mapped_column(SafeFloat)
    nominal_flops_per_token: Mapped[float | None] = mapped_column(SafeFloat)
    executed_flops_per_token: Mapped[float | None] = mapped_column(SafeFloat)
    realised_flops_per_token: Mapped[float | None] = mapped_column(SafeFloat)
    budget_flops: Mapped[float | None] = mapped_column(SafeFloat)
    training_flops: Mapped[float | None] = mapped_column(SafeFloat)
    tokens_seen: Mapped[int | None] = mapped_column(BigInteger)
    planned_tokens: Mapped[int | None] = mapped_column(BigInteger)
    steps: Mapped[int | None] = mapped_column(Integer)
    wall_time_s: Mapped[float | None] = mapped_column(SafeFloat)
    tokens_per_s: Mapped[float | None] = mapped_column(SafeFloat)
    step_time_share: Mapped[float | None] = mapped_column(SafeFloat)
    peak_memory_mb: Mapped[float | None] = mapped_column(SafeFloat)
    branch_flops: Mapped[float | None] = mapped_column(SafeFloat)  # ladder: FLOPs of the cooldown branches
    kv_bytes_per_token: Mapped[float | None] = mapped_column(SafeFloat)  # counted at seq_len; NULL before v5
    decode_flops_per_token: Mapped[float | None] = mapped_column(SafeFloat)
    seed: Mapped[int | None] = mapped_column(BigInteger)

    @classmethod
    def find(cls, session: Session, search_id: int, number: int) -> TrialModel | None:
        return session.scalars(select(cls).where(cls.search_id == search_id, cls.number == number)).one_or_none()


class CurvePointModel(Base):
    """One point of a trial's loss curve (val_loss only where the trainer evaluated)."""

    __tablename__ = "resnas_trial_curve_points"

    trial_id: Mapped[int] = mapped_column(ForeignKey("resnas_trials.id", ondelete="CASCADE"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    tokens: Mapped[int] = mapped_column(BigInteger)
    train_loss: Mapped[float | None] = mapped_column(SafeFloat)
    val_loss: Mapped[float | None] = mapped_column(SafeFloat)
    training_flops: Mapped[float] = mapped_column(SafeFloat)


class DiagnosticsModel(Base):
    """A trial's model diagnostics: per-layer residual RMS, NAG angles/gates, ANCRe p, skip rates..."""

    __tablename__ = "resnas_trial_diagnostics"

    trial_id: Mapped[int] = mapped_column(ForeignKey("resnas_trials.id", ondelete="CASCADE"), primary_key=True)
    diagnostics: Mapped[dict] = mapped_column(SafeJSON)


class WidthCertificateModel(Base):
    """`workers.trial.width_probe.WidthCertificate` of a completed trial."""

    __tablename__ = "resnas_width_certificates"

    trial_id: Mapped[int] = mapped_column(ForeignKey("resnas_trials.id", ondelete="CASCADE"), primary_key=True)
    n_sequences: Mapped[int] = mapped_column(Integer)
    d_model: Mapped[int] = mapped_column(Integer)
    mu_norm: Mapped[float | None] = mapped_column(SafeFloat)
    d_par: Mapped[float | None] = mapped_column(SafeFloat)
    d_2: Mapped[float | None] = mapped_column(SafeFloat)
    d_align: Mapped[float | None] = mapped_column(SafeFloat)
    b_exact_8_8: Mapped[float | None] = mapped_column(SafeFloat)
    b_align_8_8: Mapped[float | None] = mapped_column(SafeFloat)
    p_hat_8_8: Mapped[float | None] = mapped_column(SafeFloat)


class RungModel(Base):
    """One rung of a trial's budget ladder: written once, by the worker the moment the rung is measured.

    Keyed by (search, trial number, rung, seed) rather than by trial row, so a row written before a
    retry or a dead driver is kept, and a retried attempt that measures the rung again adds nothing.
    """

    __tablename__ = "resnas_rungs"

    search_id: Mapped[int] = mapped_column(ForeignKey("resnas_searches.id", ondelete="CASCADE"), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    rung: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    seed: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    budget_flops: Mapped[float] = mapped_column(SafeFloat)
    steps: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[int] = mapped_column(BigInteger)
    val_loss: Mapped[float | None] = mapped_column(SafeFloat)  # inf (diverged in its cooldown) or NULL for NaN
    training_flops: Mapped[float] = mapped_column(SafeFloat)
    train_seconds: Mapped[float | None] = mapped_column(SafeFloat)
    d_model: Mapped[int | None] = mapped_column(Integer)  # a replica rung's width
    params: Mapped[int | None] = mapped_column(BigInteger)  # a replica rung's parameters
    tokens_per_param: Mapped[float | None] = mapped_column(SafeFloat)  # tokens / params of the replica's run
    target_tokens_per_param: Mapped[float | None] = mapped_column(SafeFloat)  # D_T / N_T of the target
    on_path: Mapped[bool | None] = mapped_column(Boolean)  # False: narrowest width at fewer tokens per param
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
