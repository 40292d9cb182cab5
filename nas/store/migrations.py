"""Versioned schema migrations: `MIGRATIONS` in order, applied by `ensure_schema(engine)`.

Version 1 creates every table as `schema.py` defines it. A later migration is a function of the
open connection; since version 1 always builds the *current* ORM, later migrations must check
`sqlalchemy.inspect(connection)` before altering (a fresh database already has their change).

Several processes may open a fresh database at once. `ensure_schema` takes the database's write
lock first (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: `pg_advisory_xact_lock`), then re-reads the
recorded version inside the lock, so exactly one process creates or upgrades the schema and the
others find it done. `schema_lock(url)` holds the same PostgreSQL lock for other schema work
(Optuna's tables).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from sqlalchemy import Connection, Engine, create_engine, inspect, make_url, select, text
from sqlalchemy.pool import NullPool

from .schema import Base, SchemaVersionModel, utcnow

SCHEMA_LOCK_KEY = 0x7265736E6173  # "resnas": the PostgreSQL advisory-lock key for schema changes


class SchemaVersionError(RuntimeError):
    """The database was written by a newer version of this code."""


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection], None]


def _create_all(connection: Connection) -> None:
    Base.metadata.create_all(connection)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "searches, trials, curve points, diagnostics, width certificates", _create_all),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


def recorded_version(connection: Connection) -> int:
    """The version in `schema_version`, or 0 for a database without one (fresh)."""
    if not inspect(connection).has_table(SchemaVersionModel.__tablename__):
        return 0
    version = connection.execute(select(SchemaVersionModel.version)).scalar_one_or_none()
    return version or 0


def _check_not_newer(version: int) -> None:
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(f"database schema is at version {version}, newer than this code "
                                 f"(version {SCHEMA_VERSION}): upgrade resnas to use it")


def _take_write_lock(connection: Connection) -> None:
    """Hold the database's schema lock until this transaction ends."""
    dialect = connection.dialect.name
    if dialect == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
    elif dialect == "sqlite" and not getattr(connection.connection.driver_connection, "in_transaction", True):
        # An engine without the Store's `begin` hook (legacy pysqlite): nothing was begun yet.
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _record(connection: Connection, version: int) -> None:
    table = SchemaVersionModel.__table__
    if connection.execute(select(table.c.id)).first() is None:
        connection.execute(table.insert().values(id=1, version=version, updated_at=utcnow()))
    else:
        connection.execute(table.update().values(version=version, updated_at=utcnow()))


@contextmanager
def schema_lock(url: str) -> Iterator[None]:
    """Hold the schema lock of the database at `url` for the block (PostgreSQL; elsewhere a no-op).

    For schema work by code with its own connections: Optuna's RDB storage creates its tables on
    first use, and two processes doing so at once on PostgreSQL collide (duplicate `pg_type` rows).
    A session-level advisory lock on a connection of its own, with the key `ensure_schema` uses.
    """
    if make_url(url).get_backend_name() != "postgresql":
        yield
        return
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
    with engine.connect() as connection:
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
    return SCHEMA_VERSION
