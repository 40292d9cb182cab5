"""Versioned schema migrations: `MIGRATIONS` in order, applied by `ensure_schema(engine)`.

Version 1 creates every table as `schema.py` defines it. A later migration is a function of the
open connection; since version 1 always builds the *current* ORM, later migrations must check
`sqlalchemy.inspect(connection)` before altering (a fresh database already has their change).

Version 3 adds the budget ladder: the `resnas_rungs` table and `resnas_trials.branch_flops`.
Version 4 adds the replica rungs' columns to `resnas_rungs` (`REPLICA_RUNG_COLUMNS`).
Version 5 adds each trial's counted inference costs to `resnas_trials` (`INFERENCE_COST_COLUMNS`);
older rows keep NULL there and readers count them from the config (`nas.space.objectives`).
What a version added is a fact of that version, so these lists are written out here, not read from the
records whose fields the current columns follow (a field added later comes with its own migration).

Version 2 gives retries and interrupted trials their own statuses (`workers.status.TrialStatus`):
version 1 stored both as `failed` with a text marker in `failure_reason`, which this migration
turns into `retrying` and `interrupted`. It widens the status CHECK constraint first: PostgreSQL
alters it in place; SQLite cannot alter a constraint, so the table is rebuilt (SQLite's documented
procedure: foreign keys off for the transaction, new table, copy, drop, rename, indexes, then
`foreign_key_check`).

Stored formats: a search's budget is stored as the JSON of `nas.space.budget.Budget` when it was created;
`upgrade_budget` brings a budget stored by an older resnas to the current fields, with the values that search ran
with (`BUDGET_UPGRADES`, in order); `upgrade_space` does the same for its space.

Several processes may open a fresh database at once. `ensure_schema` takes the database's write
lock first (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: `pg_advisory_xact_lock`), then re-reads the
recorded version inside the lock, so exactly one process creates or upgrades the schema and the
others find it done. `schema_lock(url)` serialises other schema work (Optuna's tables) the
same way across processes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from sqlalchemy import Connection, Engine, Table, create_engine, inspect, make_url, select, text
from sqlalchemy.pool import NullPool
from sqlalchemy.schema import CreateTable

from workers.status import TrialStatus

from .schema import (
    TRIAL_STATUSES,
    Base,
    RungModel,
    SchemaVersionModel,
    TrialModel,
    utcnow,
)

SCHEMA_LOCK_KEY = 0x7265736E6173  # "resnas": the PostgreSQL advisory-lock key for schema changes
REPLICA_RUNG_COLUMNS = ("d_model", "params", "tokens_per_param", "target_tokens_per_param", "on_path")  # version 4
INFERENCE_COST_COLUMNS = ("kv_bytes_per_token", "decode_flops_per_token")  # version 5


class SchemaVersionError(RuntimeError):
    """The database was written by a newer version of this code."""


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection], None]


def _table(model: type[Base]) -> Table:
    """The model's table, typed as one (SQLAlchemy types `__table__` as any FROM clause)."""
    return cast(Table, model.__table__)


def _create_all(connection: Connection) -> None:
    Base.metadata.create_all(connection)


# Version 1's text markers inside `failure_reason` (written by nas.search.tune_runner and nas.search.launch then).
V1_RETRYING_MARKER = "(retrying: attempt"
V1_INTERRUPTED_PREFIX = "interrupted: the search driver stopped"


def _trial_status_constraint_is_current(connection: Connection) -> bool:
    checks = inspect(connection).get_check_constraints(TrialModel.__tablename__)
    text_of = " ".join(str(c.get("sqltext", "")) for c in checks if c.get("name") == "ck_trials_status")
    return all(f"'{status}'" in text_of for status in TRIAL_STATUSES)


def _rebuild_sqlite_trials(connection: Connection) -> None:
    """Recreate `resnas_trials` as the ORM defines it and copy every row over, in SQLite's documented
    order (new table, copy, drop, rename, indexes); foreign keys are off (see `ensure_schema`), so the
    drop does not cascade and the child tables' references, by name, hold again after the rename."""
    table = _table(TrialModel)
    new = f"_{table.name}_new"
    create = str(CreateTable(table).compile(dialect=connection.dialect))
    columns = ", ".join(f'"{c["name"]}"' for c in inspect(connection).get_columns(table.name) if c["name"] in table.c)
    connection.exec_driver_sql(create.replace(f"CREATE TABLE {table.name} (", f'CREATE TABLE "{new}" (', 1))
    connection.exec_driver_sql(f'INSERT INTO "{new}" ({columns}) SELECT {columns} FROM "{table.name}"')
    connection.exec_driver_sql(f'DROP TABLE "{table.name}"')  # and its indexes
    connection.exec_driver_sql(f'ALTER TABLE "{new}" RENAME TO "{table.name}"')
    for index in table.indexes:
        index.create(connection)


def _statuses_for_retries_and_interruptions(connection: Connection) -> None:
    if not _trial_status_constraint_is_current(connection):
        if connection.dialect.name == "sqlite":
            _rebuild_sqlite_trials(connection)
        else:
            connection.exec_driver_sql("ALTER TABLE resnas_trials DROP CONSTRAINT ck_trials_status")
            values = ", ".join(f"'{s}'" for s in TRIAL_STATUSES)
            connection.exec_driver_sql(
                f"ALTER TABLE resnas_trials ADD CONSTRAINT ck_trials_status CHECK (status IN ({values}))"
            )
    trials = _table(TrialModel)
    failed = trials.c.status == TrialStatus.FAILED
    connection.execute(
        trials.update()
        .where(failed, trials.c.failure_reason.contains(V1_RETRYING_MARKER))
        .values(status=TrialStatus.RETRYING)
    )
    connection.execute(
        trials.update()
        .where(failed, trials.c.failure_reason.startswith(V1_INTERRUPTED_PREFIX))
        .values(status=TrialStatus.INTERRUPTED)
    )


def _budget_ladder(connection: Connection) -> None:
    """The rungs table, and the trials' `branch_flops` column (a store from before either)."""
    _table(RungModel).create(connection, checkfirst=True)
    columns = {c["name"] for c in inspect(connection).get_columns(TrialModel.__tablename__)}
    if "branch_flops" not in columns:
        kind = _table(TrialModel).c.branch_flops.type.compile(dialect=connection.dialect)
        connection.exec_driver_sql(f"ALTER TABLE {TrialModel.__tablename__} ADD COLUMN branch_flops {kind}")


def _add_columns(connection: Connection, model: type[Base], names: tuple[str, ...]) -> None:
    """Add the ORM's columns `names` to `model`'s table where it lacks them."""
    columns = {c["name"] for c in inspect(connection).get_columns(model.__tablename__)}
    table = _table(model)
    for name in names:
        if name not in columns:
            kind = table.c[name].type.compile(dialect=connection.dialect)
            connection.exec_driver_sql(f"ALTER TABLE {model.__tablename__} ADD COLUMN {name} {kind}")


def _replica_rungs(connection: Connection) -> None:
    """A replica rung's width, parameters, tokens per parameter (its own and the target's) and path flag."""
    _add_columns(connection, RungModel, REPLICA_RUNG_COLUMNS)


def _inference_costs(connection: Connection) -> None:
    """A trial's KV-cache bytes and decode FLOPs per token."""
    _add_columns(connection, TrialModel, INFERENCE_COST_COLUMNS)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "searches, trials, curve points, diagnostics, width certificates", _create_all),
    Migration(
        2,
        "trial statuses retrying and interrupted (were text markers in failure_reason)",
        _statuses_for_retries_and_interruptions,
    ),
    Migration(3, "budget ladder: rungs table, trials.branch_flops", _budget_ladder),
    Migration(4, "replica rungs: width, parameters, tokens per parameter, on-path flag", _replica_rungs),
    Migration(5, "trials' counted inference costs: KV-cache bytes and decode FLOPs per token", _inference_costs),
)
SCHEMA_VERSION = MIGRATIONS[-1].version

LEGACY_TARGET_RATIO = 1000.0  # T / C of a budget stored without a ladder kind and without a target


def _budget_ladder_kind(raw: dict) -> dict:
    """A budget stored without a ladder kind ran the budget ladder (one rung unless it said otherwise), its default
    target LEGACY_TARGET_RATIO x C."""
    if "ladder" in raw or "ladder_kind" in raw:
        return raw
    target = raw.get("target_flops") or LEGACY_TARGET_RATIO * raw["trial_flops"]
    return {**raw, "ladder": "budget", "target_flops": target}


def _budget_narrowing(raw: dict) -> dict:
    """A budget stored without a narrowing narrowed its replicas at a fixed head count, no narrower than its
    `min_replica_width`; the narrowing's three fields are one object."""
    if isinstance(raw.get("narrowing"), dict):
        return raw
    rest = {k: v for k, v in raw.items() if k not in ("narrowing", "min_replica_width", "min_replica_share")}
    keep = raw.get("narrowing", "heads")
    share = raw.get("min_replica_share", 0.0 if "narrowing" not in raw else 0.5)
    return {**rest, "narrowing": {"min_width": raw.get("min_replica_width", 8), "min_share": share, "keep": keep}}


def _budget_anchors(raw: dict) -> dict:
    """A budget stored without anchors answered with its ladder as asked and no bias prior."""
    return raw if "anchors" in raw else {**raw, "anchors": 0, "layout": "as_given", "bias_prior": "none"}


def _budget_tokens_per_param(raw: dict) -> dict:
    """A budget stored without a tokens-per-parameter bound trained every config it sampled."""
    return raw if "min_tokens_per_param" in raw else {**raw, "min_tokens_per_param": None}


def _budget_level(raw: dict) -> dict:
    """A budget stored without a level measured no configs below its top rung."""
    return raw if "level_configs" in raw else {**raw, "level_configs": 0}


def _budget_kind_field(raw: dict) -> dict:
    """The ladder kind's field is `ladder_kind`."""
    if "ladder" not in raw:
        return raw
    return {**{k: v for k, v in raw.items() if k != "ladder"}, "ladder_kind": raw["ladder"]}


BUDGET_UPGRADES: tuple[Callable[[dict], dict], ...] = (
    _budget_ladder_kind,
    _budget_narrowing,
    _budget_anchors,
    _budget_tokens_per_param,
    _budget_level,
    _budget_kind_field,
)


def upgrade_space(raw: dict, on_budget_ladder: bool) -> dict:
    """A stored space's JSON in the current format: a space stored without a learning-rate schedule among its
    fixed values ran its replica rungs and single budgets on a cosine, a budget ladder on wsd."""
    fixed = raw.get("fixed") or {}
    if "schedule" in fixed:
        return raw
    return {**raw, "fixed": {**fixed, "schedule": "wsd" if on_budget_ladder else "cosine"}}


def upgrade_budget(raw: dict) -> dict:
    """A stored budget's JSON in the current format (module docstring): each of BUDGET_UPGRADES in turn; a budget
    stored without rungs had one."""
    for upgrade in BUDGET_UPGRADES:
        raw = upgrade(raw)
    return {"rungs": 1, **raw}


def recorded_version(connection: Connection) -> int:
    """The version in `schema_version`, or 0 for a database without one (fresh)."""
    if not inspect(connection).has_table(SchemaVersionModel.__tablename__):
        return 0
    version = connection.execute(select(SchemaVersionModel.version)).scalar_one_or_none()
    return version or 0


def _check_not_newer(version: int) -> None:
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"database schema is at version {version}, newer than this code "
            f"(version {SCHEMA_VERSION}): upgrade resnas to use it"
        )


def _take_write_lock(connection: Connection) -> None:
    """Hold the database's schema lock until this transaction ends."""
    dialect = connection.dialect.name
    if dialect == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
    elif dialect == "sqlite" and not getattr(connection.connection.driver_connection, "in_transaction", True):
        # An engine without the Store's `begin` hook (legacy pysqlite): nothing was begun yet.
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _record(connection: Connection, version: int) -> None:
    table = _table(SchemaVersionModel)
    if connection.execute(select(table.c.id)).first() is None:
        connection.execute(table.insert().values(id=1, version=version, updated_at=utcnow()))
    else:
        connection.execute(table.update().values(version=version, updated_at=utcnow()))


@contextmanager
def schema_lock(url: str) -> Iterator[None]:
    """Hold a schema lock on the database at `url` for the block, for schema work by code with its
    own connections: Optuna's RDB storage creates its tables on first use, and two processes doing
    so at once collide ("table ... already exists" on SQLite, duplicate `pg_type` rows on PostgreSQL).

    PostgreSQL: the advisory lock `ensure_schema` takes, session-level, on a connection of its own.
    SQLite file: an exclusive `flock` on the file's directory (a database write lock would block
    the very writes it guards; the file itself must not be opened beside SQLite's own descriptors,
    whose POSIX locks a close() would drop). Other databases: no lock.
    """
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() == "postgresql":
        with _advisory_lock(url):
            yield
    elif (
        parsed.get_backend_name() == "sqlite" and database not in ("", ":memory:") and not database.startswith("file:")
    ):
        with _directory_lock(Path(database).expanduser().resolve().parent):
            yield
    else:
        yield


@contextmanager
def _advisory_lock(url: str) -> Iterator[None]:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": SCHEMA_LOCK_KEY})
    finally:
        engine.dispose()


@contextmanager
def _directory_lock(directory: Path) -> Iterator[None]:
    """An exclusive flock on `directory` (none where flock or the directory is missing)."""
    try:
        import fcntl

        fd = os.open(directory, os.O_RDONLY)
    except (ImportError, OSError):  # no flock here, or no directory: the guarded work reports that itself
        fd = None
    if fd is None:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


def ensure_schema(engine: Engine) -> int:
    """Bring the database to `SCHEMA_VERSION` in one transaction; return the version.

    Raises `SchemaVersionError` if the database is newer than this code. On SQLite the Store's
    engine begins this transaction with `BEGIN IMMEDIATE` (execution option `sqlite_begin`).
    """
    with engine.connect() as connection:  # fast path, no lock: already current
        current = recorded_version(connection)
        connection.rollback()
    _check_not_newer(current)
    if current == SCHEMA_VERSION:
        return current
    with engine.connect() as connection, _sqlite_foreign_keys_off(connection):
        connection = connection.execution_options(sqlite_begin="IMMEDIATE")
        with connection.begin():
            _take_write_lock(connection)
            current = recorded_version(connection)  # re-check: another process may have won the race
            _check_not_newer(current)
            for migration in MIGRATIONS:
                if migration.version > current:
                    migration.apply(connection)
            if current < SCHEMA_VERSION:
                _record(connection, SCHEMA_VERSION)
            _check_foreign_keys(connection)
    return SCHEMA_VERSION


@contextmanager
def _sqlite_foreign_keys_off(connection: Connection) -> Iterator[None]:
    """SQLite: foreign keys off on this connection for the block (a table rebuild would otherwise
    cascade its drop into the child tables). The pragma is a no-op inside a transaction, so it is set
    on the raw connection before the migration transaction begins, and set back on afterwards."""
    if connection.dialect.name != "sqlite":
        yield
        return
    raw = connection.connection.driver_connection
    assert raw is not None, "an open SQLite connection"
    raw.execute("PRAGMA foreign_keys = OFF")
    try:
        yield
    finally:
        raw.execute("PRAGMA foreign_keys = ON")


def _check_foreign_keys(connection: Connection) -> None:
    """SQLite: the migrated tables still satisfy every foreign key (else the transaction rolls back)."""
    if connection.dialect.name == "sqlite":
        broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise RuntimeError(f"schema migration broke {len(broken)} foreign keys, e.g. {tuple(broken[0])}")
