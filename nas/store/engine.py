"""Engines and URLs: one SQLAlchemy engine per store, safe across processes.

URLs are generic SQLAlchemy URLs (`sqlite:///path/resnas.db`, `postgresql+psycopg://user:pw@host/db`);
`display_url` hides the password. Every engine checks a connection with a ping before use
(`pool_pre_ping`) and a forked child starts a fresh pool (two processes on one socket corrupt both
sessions). An engine for an existing database only (`make_engine(url, existing=True)`, a reader's) never
creates one: connecting to a server database never does, and a SQLite file is opened in SQLite's `mode=rw`.

SQLite is made safe for several writer processes: WAL journal, a 30 s busy timeout, foreign keys
on, and write transactions that start with `BEGIN IMMEDIATE` when asked (`sqlite_begin` execution
option): they take the write lock up front, so a read-then-write transaction never fails on a lock
upgrade, and readers are never blocked.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import time
import weakref
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError

from .rows import StoreError

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_ENV = "RESNAS_STORE_RETRY_SECONDS"  # how long writes retry an unreachable store (default below)
DEFAULT_RETRY_SECONDS = 300.0
MAX_BACKOFF_SECONDS = 30.0


def default_url(cwd: str | Path) -> str:
    """The SQLite file `resnas.db` in `cwd`."""
    return f"sqlite:///{Path(cwd).resolve() / 'resnas.db'}"


def sqlite_file(url: str) -> Path | None:
    """The file of a file-backed SQLite URL; None for another database, one in memory, a `file:` URI or a
    malformed URL (`make_engine` reports it)."""
    try:
        parsed = make_url(url)
    except Exception:
        return None
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database).expanduser()


def absolute_sqlite(url: str) -> str:
    """`url`, with the path of a SQLite file made absolute (relative to the working directory now)."""
    path = sqlite_file(url)
    if path is None:
        return url
    return make_url(url).set(database=str(path.resolve())).render_as_string(hide_password=False)


def display_url(url: str) -> str:
    """`url` with its password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", str(url))


def one_line(err: BaseException) -> str:
    """`Kind: first line`, Kind being SQLAlchemy's portable class (IntegrityError, OperationalError...).

    The text is the driver's, without SQLAlchemy's [SQL: ...] lines; the class is SQLAlchemy's, so a
    NOT NULL violation reads `IntegrityError` on SQLite and PostgreSQL alike.
    """
    orig = getattr(err, "orig", None) or err
    text = str(orig).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


SQLITE_BUSY_TIMEOUT_S = 30.0


def _on_sqlite_connect(dbapi_connection, _record, *, wal: bool = True) -> None:
    dbapi_connection.isolation_level = None  # the driver begins nothing; `_on_sqlite_begin` does
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_S * 1000:.0f}")
    cursor.execute("PRAGMA foreign_keys = ON")
    if wal:  # a reader's engine leaves the file as it is: WAL, once set by the store's writer, stays
        _set_wal(cursor)
    cursor.close()


def _set_wal(cursor) -> None:
    """Put the database in WAL mode (it stays so, in the file). Switching a fresh file needs an exclusive lock,
    and SQLite answers `database is locked` at once, without its busy handler, to every other process switching
    it at the same moment: retried here, with backoff, for as long as the busy timeout."""
    deadline, pause = time.monotonic() + SQLITE_BUSY_TIMEOUT_S, 0.01
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as err:  # the stdlib driver SQLAlchemy's sqlite dialect uses
            if not _busy(err) or time.monotonic() > deadline:
                raise
            time.sleep(pause)
            pause = min(2 * pause, 0.5)


def _busy(err: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED (by code from Python 3.11, by SQLite's message before)."""
    name = getattr(err, "sqlite_errorname", None)
    if name is not None:
        return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))
    return "locked" in str(err) or "busy" in str(err)


def _on_sqlite_begin(connection) -> None:
    mode = connection.get_execution_options().get("sqlite_begin", "DEFERRED")
    if mode not in ("DEFERRED", "IMMEDIATE", "EXCLUSIVE"):
        raise ValueError(f"sqlite_begin must be DEFERRED, IMMEDIATE or EXCLUSIVE, not {mode!r}")
    connection.exec_driver_sql(f"BEGIN {mode}")


_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()  # every Store's engine in this process


def _fresh_pools_after_fork() -> None:
    """In a forked child, every engine starts a new pool; the parent's connections are left alone.

    Two processes talking over one socket corrupt both sessions, and a child that closed (or
    pinged) an inherited connection would end or disturb the parent's session.
    """
    for engine in list(_ENGINES):
        engine.dispose(close=False)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_pools_after_fork)


def make_engine(url: str, *, existing: bool = False) -> Engine:
    """An engine for `url`: strict JSON everywhere, a pool per process (connections are checked with
    a ping before use, and never shared across fork()), and the SQLite settings of the module docstring.
    `existing`: for a database that exists, never created by connecting (StoreError for a missing SQLite file)."""
    parsed, path = make_url(url), sqlite_file(url)
    if path is not None and existing:
        if not path.is_file():
            raise StoreError("no such file (`nas search` creates the store)")
        parsed = make_url(f"sqlite:///file:{quote(str(path.resolve()))}?mode=rw&uri=true")  # open, never create
    elif path is not None and not path.parent.is_dir():
        raise StoreError(f"directory {path.parent} does not exist")
    engine = create_engine(parsed, json_serializer=partial(json.dumps, allow_nan=False), pool_pre_ping=True)
    _ENGINES.add(engine)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", partial(_on_sqlite_connect, wal=not existing))
        event.listen(engine, "begin", _on_sqlite_begin)
    return engine


def is_disk_full(err: BaseException) -> bool:
    """The database's disk is full (SQLite: "database or disk is full"; PostgreSQL: "No space left on
    device"): not retried, since waiting frees no space; the write fails in one line at once."""
    text = str(getattr(err, "orig", None) or err).lower()
    return "disk is full" in text or "no space left on device" in text


def is_connection_error(err: BaseException) -> bool:
    """A failure of the connection, not of the statement: the server restarting or unreachable, a
    dropped connection, SQLite's lock wait running out. Worth retrying; an integrity error never is."""
    if isinstance(err, IntegrityError) or is_disk_full(err):
        return False
    if isinstance(err, DBAPIError) and err.connection_invalidated:
        return True
    return isinstance(err, (OperationalError, InterfaceError))


def retry_window(seconds: float | None = None) -> float:
    """`seconds`, else $RESNAS_STORE_RETRY_SECONDS, else 300: a database failover or restart takes
    seconds to a few minutes."""
    if seconds is not None:
        return float(seconds)
    return float(os.environ.get(RETRY_ENV, DEFAULT_RETRY_SECONDS))


def call_with_retries(
    call: Callable[[], T],
    *,
    window: float,
    where: str,
    what: str,
    cause: Callable[[BaseException], BaseException | None],
) -> T:
    """`call()`, run again with exponential backoff (0.5 s doubling up to 30 s) while it fails on a
    connection-class error, for up to `window` seconds; then the last error is raised.

    `cause(err)` is the database error behind an exception `call` raises (None: not a database
    error, raised at once). Each wait is logged as one line naming the store (`where`), the
    operation (`what`), for how long it has failed and how much longer it will be retried.
    """
    started, delay = time.monotonic(), 0.5
    while True:
        try:
            return call()
        except Exception as err:
            behind, waited = cause(err), time.monotonic() - started
            if behind is None or not is_connection_error(behind) or waited >= window:
                raise
            log.warning(
                "store %s unreachable for %.0f s (%s); retrying %s for up to %.0f s more",
                where,
                waited,
                one_line(behind),
                what,
                window - waited,
            )
            time.sleep(min(delay, window - waited))
            delay = min(2 * delay, MAX_BACKOFF_SECONDS)
