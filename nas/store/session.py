"""The store's one session: `StoreSession` opens the database and owns the single context manager every read and
write runs in (`_session`), which commits or rolls back the transaction and turns SQLAlchemy's errors into
`StoreError`, so callers never see an ORM object or a driver exception (rows and errors: `rows.py`; engines,
URLs and SQLite's settings: `engine.py`). `retried` runs a method again while the store is unreachable.

PostgreSQL runs its default READ COMMITTED transactions: each search's trials are written by its driver and
its rungs by the workers (`record_rung`, insert-once), and unique constraints (search name; search and trial
number; rung keys) turn any other race into an error. On SQLite, writes begin with `BEGIN IMMEDIATE`.
`url` is the URL to connect with and may hold a password; print `display_url`.

A store opened `read_only` (the reading commands') is one that exists, at this code's schema
version: opening it creates, migrates and writes nothing, and a write through it is refused (on SQLite, closing
the last connection may still fold a write-ahead log a killed writer left, committed rows only, into the file).
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from .engine import (
    absolute_sqlite,
    call_with_retries,
    display_url,
    is_connection_error,
    make_engine,
    one_line,
    retry_window,
)
from .migrations import SCHEMA_VERSION, SchemaVersionError, _check_not_newer, ensure_schema, recorded_version
from .rows import StoreError, UnknownSearch, UnknownTrial
from .schema import SearchModel, TrialModel

Method = TypeVar("Method", bound=Callable[..., Any])
Opened = TypeVar("Opened", bound="StoreSession")


def retried(method: Method) -> Method:
    """A Store method run again while the store is unreachable (`engine.call_with_retries`, for the
    store's `retry_seconds`); past that, a one-line `StoreError` says for how long.

    Each retried method is one transaction, rolled back when it fails, so a retry repeats nothing
    half-done; rungs are insert-once and finishing a trial again replaces it. One case is not covered:
    a commit that reached the server whose answer was lost, for `start_trial`, is refused on retry
    as a trial that already exists."""

    @functools.wraps(method)
    def run(self: StoreSession, *args, **kwargs):
        started = time.monotonic()
        try:
            return call_with_retries(
                lambda: method(self, *args, **kwargs),
                window=self.retry_seconds,
                where=self.display_url,
                what=method.__name__,
                cause=lambda err: err.__cause__ if isinstance(err, StoreError) else None,
            )
        except StoreError as err:
            if err.__cause__ is None or not is_connection_error(err.__cause__):
                raise
            waited = time.monotonic() - started
            raise StoreError(f"store {self.display_url} unreachable for {waited:.0f} s: {err}") from err.__cause__

    return run  # type: ignore[return-value]


def check_schema(engine: Engine) -> None:
    """The store a reader opens: resnas's tables at this code's schema version, as they are (`ensure_schema`,
    a writer's, creates and upgrades them). StoreError without them, SchemaVersionError at another version."""
    with engine.connect() as connection:
        version = recorded_version(connection)
        connection.rollback()
    _check_not_newer(version)
    if version == 0:
        raise StoreError("no resnas tables in it (`nas search` creates them)")
    if version < SCHEMA_VERSION:
        raise SchemaVersionError(
            f"database schema is at version {version}, older than this code (version {SCHEMA_VERSION}): "
            "a writing command (`nas search`, `nas resume`) upgrades it"
        )


class StoreSession:
    """The resnas database at `url`, its schema created or upgraded on open (with `read_only`, only checked:
    `check_schema`; with `create` False, a SQLite file must exist already), and the one session every read
    (`StoreReads`) and write (`StoreWrites`) runs in; `Store` is both.

    `close()` (or leaving a `with` block) closes its connections; so does dropping the last
    reference to it, so `Store(url).trials(name)` leaves no idle server connection behind.
    """

    def __init__(self, url: str, *, retry_seconds: float | None = None, read_only: bool = False, create: bool = True):
        # What to connect with (Optuna's storage and the workers' rung writes too, from whatever working
        # directory Ray gives them: a relative SQLite path is made absolute). May hold a password: never print it.
        self.url = absolute_sqlite(str(url))
        self.display_url = display_url(url)  # safe to print: password hidden
        self.retry_seconds = retry_window(retry_seconds)  # how long writes retry an unreachable store
        self.read_only = read_only
        engine = None
        try:
            engine = make_engine(url, existing=read_only or not create)
            (check_schema if read_only else ensure_schema)(engine)
        except (StoreError, SQLAlchemyError, SchemaVersionError, ImportError, OSError, ValueError) as err:
            if engine is not None:
                engine.dispose()
            detail = str(err) if isinstance(err, (StoreError, SchemaVersionError)) else one_line(err)
            raise StoreError(f"cannot open store {self.display_url}: {detail}") from err
        self._engine = engine
        self._dispose = weakref.finalize(self, engine.dispose)  # runs once: at close() or when unreferenced
        self._readers = sessionmaker(self._engine, expire_on_commit=False)
        self._writers = sessionmaker(self._engine.execution_options(sqlite_begin="IMMEDIATE"), expire_on_commit=False)

    def __repr__(self) -> str:
        return f"Store({self.display_url!r})"

    def __enter__(self: Opened) -> Opened:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._dispose()

    @contextmanager
    def _session(self, *, write: bool = True) -> Iterator[Session]:
        """One transaction: commit on success, rollback on any error; database errors -> StoreError."""
        if write and self.read_only:
            raise StoreError(f"store {self.display_url} is open read-only")
        with (self._writers if write else self._readers)() as session:
            try:
                yield session
                session.commit()
            except SQLAlchemyError as err:
                session.rollback()
                raise StoreError(f"database error: {one_line(err)}") from err
            except BaseException:
                session.rollback()
                raise

    @staticmethod
    def _search(session: Session, name: str) -> SearchModel:
        search = SearchModel.find(session, name)
        if search is None:
            raise UnknownSearch(f"no search named {name!r}")
        return search

    @staticmethod
    def _trial(session: Session, trial_id: int) -> TrialModel:
        trial = session.get(TrialModel, trial_id)
        if trial is None:
            raise UnknownTrial(f"no trial with id {trial_id}")
        return trial
