"""Results the store could not take: kept on local disk, written when it is back, exactly once.

A write of the search driver that still fails after the store's retry window
(`nas.store.engine.retry_window`, $RESNAS_STORE_RETRY_SECONDS) is appended to the search's spool
file, one JSON line per write, flushed and fsync'd before the driver goes on:

    {"op": "finish_trial", "trial_id": ID, "result": {...}}
    {"op": "start_and_finish", "started": {"number": N, "attempt": A, "config": {...}, "costs": {...}},
     "result": {...}}
    {"op": "optuna_tell", "study": NAME, "number": N, "values": [...] | null}

A result is a `TrialResult` as `TrialResult.to_dict` gives it, a trial's row as the driver opened it a
`StartedTrial` (`spooled_finish`, `spooled_start_and_finish`); both are rebuilt, typed, when replayed.

`replay` applies the lines in order and keeps only those that failed again.  Exactly once, because
each write is idempotent: `finish_trial` replaces a row's result (written twice is written once); a
trial started during the outage gets its row only if no row has its number; an Optuna trial is told
only while it is still RUNNING.  The driver replays its spool at the next write that succeeds and at
the end of the search; `nas resume` replays it before anything else.

The file is `$RESNAS_SPOOL` (default `~/.cache/resnas/spool`) / `<hash of store URL and search>.jsonl`:
on the machine that ran the driver, which is where `nas resume` must run to write what it holds.
Writes the trial processes make themselves (rung rows) are not spooled: a trial whose rung cannot be
stored within the window fails with that reason and is retried (`--retries`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import optuna

from workers.trial.contract import CountedCosts
from workers.trial.result import TrialResult

from ..store import Store, is_connection_error

log = logging.getLogger(__name__)

SPOOL_ENV = "RESNAS_SPOOL"


def store_unreachable(err: BaseException) -> bool:
    """True when `err` (or an error behind it) is a connection-class database error: the store is down,
    as opposed to refusing the write."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        if is_connection_error(current):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


@dataclass(frozen=True)
class StartedTrial:
    """A trial's row as the driver opens it when Tune starts the trial: its number (Optuna's too), the attempt,
    its knobs and its counted costs (`TrialTicket.costs`)."""

    number: int
    attempt: int
    config: dict
    costs: CountedCosts

    def open_row(self, store: Store, search: str) -> int:
        """`Store.start_trial` of this trial; its row id."""
        return store.start_trial(
            search,
            number=self.number,
            attempt=self.attempt,
            config=self.config,
            optuna_trial_number=self.number,
            costs=self.costs,
        )


def spooled_finish(trial_id: int, result: TrialResult) -> dict:
    """The spool entry of a trial's result the store could not take."""
    return {"op": "finish_trial", "trial_id": trial_id, "result": result.to_dict()}


def spooled_start_and_finish(started: StartedTrial, result: TrialResult) -> dict:
    """The spool entry of a trial started, and finished, while the store was unreachable."""
    return {"op": "start_and_finish", "started": asdict(started), "result": result.to_dict()}


def spool_path(store_url: str, search: str) -> Path:
    """Where the spool of `search` in the store at `store_url` lives on this machine."""
    root = Path(os.environ.get(SPOOL_ENV) or Path.home() / ".cache" / "resnas" / "spool").expanduser()
    key = hashlib.blake2b(f"{store_url}\n{search}".encode(), digest_size=10).hexdigest()
    return root / f"{key}.jsonl"


def _json_safe(value: Any) -> Any:
    """Plain JSON: inf and nan become strings (`_restore` turns them back)."""
    if isinstance(value, float) and not math.isfinite(value):
        return {"__float__": repr(value)}
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _restore(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__float__"}:
            return float(value["__float__"])
        return {k: _restore(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore(v) for v in value]
    return value


class Spool:
    """The spool file of one search (see the module docstring); thread-safe appends."""

    def __init__(self, store: Store, search: str):
        self.store, self.search = store, search
        self.path = spool_path(store.url, search)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        """Tune pickles its search algorithm (for experiment restore): keep the store's URL, not its engine."""
        return {"url": self.store.url, "search": self.search}

    def __setstate__(self, state: dict) -> None:
        self.__init__(Store(state["url"]), state["search"])

    def __len__(self) -> int:
        return len(self._entries())

    def append(self, entry: dict) -> None:
        """Keep one write on disk (flushed and fsync'd) and say so in the log."""
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(_json_safe(entry)) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        log.error(
            "store unreachable past its retry window: %s of search %r kept in %s; written when the store is back "
            "(at the next write that succeeds, the end of the search, or `nas resume %s`)",
            entry["op"],
            self.search,
            self.path,
            self.search,
        )

    def _entries(self) -> list[dict]:
        if not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [_restore(json.loads(line)) for line in lines if line.strip()]

    def replay(self) -> int:
        """Apply every kept write in order; those that fail on the store being down again stay kept.
        Returns how many were written.  Errors other than an unreachable store are raised."""
        with self._lock:
            entries = self._entries()
            if not entries:
                return 0
            kept, written = [], 0
            for entry in entries:
                if kept:  # keep the order: once one fails, the rest wait behind it
                    kept.append(entry)
                    continue
                try:
                    self._apply(entry)
                    written += 1
                except Exception as err:
                    if not store_unreachable(err):
                        raise
                    kept.append(entry)
            self._rewrite(kept)
        if written:
            log.warning("wrote %d kept writes of search %r from %s", written, self.search, self.path)
        return written

    def _rewrite(self, entries: list[dict]) -> None:
        if not entries:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(_json_safe(e)) + "\n" for e in entries), encoding="utf-8")
        os.replace(tmp, self.path)

    def _apply(self, entry: dict) -> None:
        op = entry["op"]
        if op == "finish_trial":
            self.store.finish_trial(entry["trial_id"], TrialResult.from_dict(entry["result"]))
        elif op == "start_and_finish":
            started = entry["started"]
            row = self._row_for(StartedTrial(**{**started, "costs": CountedCosts(**started["costs"])}))
            self.store.finish_trial(row, TrialResult.from_dict(entry["result"]))
        elif op == "optuna_tell":
            from .study import optuna_storage  # opened here: it connects, and the store may be down

            tell_if_running(optuna_storage(self.store.url), entry["study"], entry["number"], entry["values"])
        else:
            raise ValueError(f"unknown spool entry {op!r} in {self.path}")

    def _row_for(self, started: StartedTrial) -> int:
        """The row of a trial started while the store was down: the one its number has, else a new one."""
        for row in self.store.trials(self.search):
            if row.number == started.number:
                if row.attempt < started.attempt and row.status != "completed":
                    break  # an earlier attempt's row: start_trial moves it aside for this one
                return row.id
        return started.open_row(self.store, self.search)


def tell_if_running(storage, study_name: str, number: int, values: list[float] | None) -> bool:
    """Tell Optuna trial `number` its values (FAIL when None) if it is still RUNNING; True if told."""
    study = optuna.load_study(study_name=study_name, storage=storage)
    trial = next((t for t in study.get_trials(deepcopy=False) if t.number == number), None)
    if trial is None or trial.state != optuna.trial.TrialState.RUNNING:
        return False
    if values is None:
        study.tell(number, state=optuna.trial.TrialState.FAIL)
    else:
        study.tell(number, values)
    return True
