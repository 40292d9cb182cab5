"""The store's access layer: `Store(url)` writes searches and trials and serves read-only rows.

Every public method is one `with self._session() as s:` block. That context manager owns the
transaction (commit, or rollback on any error) and turns SQLAlchemy's errors into `StoreError`,
so callers never see an ORM object or a driver exception (rows and errors: `rows.py`; engines,
URLs and SQLite's settings: `engine.py`).

PostgreSQL runs its default READ COMMITTED transactions: each search's trials are written by its
driver and its rungs by the workers (`record_rung`, insert-once), and unique constraints (search
name; search and trial number; rung keys) turn any other race into an error. On SQLite, writes
begin with `BEGIN IMMEDIATE`. `Store.url` is the URL to connect with and may hold a password;
print `display_url`. One class in one file: every statement that touches the tables is here, so
the transactions and the races they guard against read in one place.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import case, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from workers.status import PENDING, TrialStatus

from .engine import (
    absolute_sqlite,
    call_with_retries,
    display_url,
    is_connection_error,
    make_engine,
    one_line,
    retry_window,
)
from .migrations import SchemaVersionError, ensure_schema, recorded_version
from .rows import RungRow, SearchExists, SearchRow, SearchSummary, StoreError, TrialRow, UnknownSearch, UnknownTrial
from .schema import (
    ARCH_FIELDS,
    CURVE_FIELDS,
    RESULT_FLOAT_FIELDS,
    RESULT_INT_FIELDS,
    RUNG_FIELDS,
    WIDTH_FIELDS,
    CurvePointModel,
    DiagnosticsModel,
    RungModel,
    SearchModel,
    SearchStatus,
    TrialModel,
    WidthCertificateModel,
    utcnow,
)


def _arch_columns(config: dict) -> dict:
    """The denormalised architecture columns, from config["arch"] (or a flat config)."""
    nested = config.get("arch")
    arch = nested if isinstance(nested, dict) else config
    return {name: arch.get(name) for name in ARCH_FIELDS}


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _merged_curve(points: Iterable[dict]) -> list[dict]:
    """Curve rows keyed by step; a repeated step merges into one row (later non-null values win)."""
    rows: dict[int | None, dict] = {}
    for point in points:
        step = _int_or_none(point.get("step"))
        rows.setdefault(step, dict.fromkeys(CURVE_FIELDS)).update(
            {k: point[k] for k in CURVE_FIELDS if point.get(k) is not None}
        )
    return [{**row, "step": step, "tokens": _int_or_none(row["tokens"])} for step, row in rows.items()]


def _check_status(status: Any, allowed: Iterable[str], what: str) -> None:
    allowed = [str(a) for a in allowed]
    if status not in allowed:
        raise ValueError(f"{what} status must be one of {', '.join(allowed)}, not {status!r}")


Method = TypeVar("Method", bound=Callable[..., Any])


def retried(method: Method) -> Method:
    """A Store method run again while the store is unreachable (`engine.call_with_retries`, for the
    store's `retry_seconds`); past that, a one-line `StoreError` says for how long.

    Each retried method is one transaction, rolled back when it fails, so a retry repeats nothing
    half-done; rungs are insert-once and finishing a trial again replaces it. One case is not covered:
    a commit that reached the server whose answer was lost, for `start_trial`, is refused on retry
    as a trial that already exists."""

    @functools.wraps(method)
    def run(self: Store, *args, **kwargs):
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


FINISHED_TRIAL_STATUSES = tuple(s for s in TrialStatus if s != TrialStatus.RUNNING)


class Store:
    """The resnas database at `url`; the schema is created or upgraded on open.

    `close()` (or leaving a `with` block) closes its connections; so does dropping the last
    reference to it, so `Store(url).trials(name)` leaves no idle server connection behind.
    """

    def __init__(self, url: str, *, retry_seconds: float | None = None):
        # What to connect with (Optuna's storage and the workers' rung writes too, from whatever working
        # directory Ray gives them: a relative SQLite path is made absolute). May hold a password: never print it.
        self.url = absolute_sqlite(str(url))
        self.display_url = display_url(url)  # safe to print: password hidden
        self.retry_seconds = retry_window(retry_seconds)  # how long writes retry an unreachable store
        engine = None
        try:
            engine = make_engine(url)
            ensure_schema(engine)
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

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._dispose()

    @contextmanager
    def _session(self, *, write: bool = True) -> Iterator[Session]:
        """One transaction: commit on success, rollback on any error; database errors -> StoreError."""
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

    # ---- writes -------------------------------------------------------------------------------

    def create_search(
        self,
        name: str,
        *,
        requested_trials: int,
        budget: dict,
        space: dict,
        settings: dict,
        optuna_study_name: str | None,
        code_version: str | None,
    ) -> SearchRow:
        """A new search, status "running". Raises `SearchExists` if `name` is taken."""
        if not name:
            raise ValueError("a search needs a non-empty name")
        with self._session() as s:
            if SearchModel.find(s, name) is not None:
                raise SearchExists(f"a search named {name!r} already exists")
            search = SearchModel(
                name=name,
                status=SearchStatus.RUNNING,
                requested_trials=requested_trials,
                budget=budget,
                space=space,
                settings=settings,
                optuna_study_name=optuna_study_name,
                code_version=code_version,
            )
            s.add(search)
            try:
                s.flush()
            except IntegrityError as err:  # a concurrent writer on a database without a write lock
                raise SearchExists(f"a search named {name!r} already exists") from err
            s.refresh(search)  # as stored: JSON sanitised, times in UTC
            return _search_row(search)

    @retried
    def set_search_status(self, name: str, status: SearchStatus | str) -> None:
        _check_status(status, SearchStatus, "search")
        with self._session() as s:
            self._search(s, name).status = SearchStatus(status)

    @retried
    def set_requested_trials(self, name: str, n: int) -> None:
        if n < 0:
            raise ValueError(f"requested_trials must be >= 0, not {n}")
        with self._session() as s:
            self._search(s, name).requested_trials = n

    @retried
    def start_trial(
        self, search_name: str, *, number: int, attempt: int = 0, config: dict, optuna_trial_number: int | None = None
    ) -> int:
        """Record trial `number` as running; return its id.

        A retry (same number, higher `attempt`, earlier try not completed) reuses the row: the
        earlier try's status and reason move to `previous_attempts` and its results are cleared.
        Any other repeat of a number raises `StoreError`.
        """
        if number < 0 or attempt < 0:
            raise ValueError(f"trial number and attempt must be >= 0, not {number} and {attempt}")
        with self._session() as s:
            search = self._search(s, search_name)
            trial = TrialModel.find(s, search.id, number)
            if trial is None:
                trial = TrialModel(search_id=search.id, number=number, previous_attempts=[])
                s.add(trial)
            elif attempt > trial.attempt and trial.status != TrialStatus.COMPLETED:
                _clear_for_retry(s, trial)
            else:
                raise StoreError(
                    f"trial {number} of search {search_name!r} already exists (attempt {trial.attempt}, {trial.status})"
                )
            for key, value in dict(
                attempt=attempt,
                optuna_trial_number=optuna_trial_number,
                config=config,
                status=TrialStatus.RUNNING,
                failure_reason=None,
                started_at=utcnow(),
                finished_at=None,
                # Known from the config before any training (the search samples it): rung promotion
                # compares running trials on it.
                executed_flops_per_token=config.get("executed_flops_per_token"),
                **_arch_columns(config),
            ).items():
                setattr(trial, key, value)
            s.flush()
            return trial.id

    @retried
    def finish_trial(self, trial_id: int, result: dict) -> None:
        """Store a `TrialResult.to_dict()`: scalars, curve, diagnostics and width, in one transaction.

        Unknown keys are ignored; curve/diagnostics/width may be missing or None. The result's
        `arch`/`optim` (what actually ran) replace those of the config. Finishing twice replaces.
        """
        _check_status(result.get("status"), FINISHED_TRIAL_STATUSES, "a finished trial's")
        with self._session() as s:
            trial = self._trial(s, trial_id)
            finishing_again = trial.finished_at is not None  # else no child rows exist (a retry cleared them)
            _apply_result(trial, result)
            _replace_children(s, trial_id, result, finishing_again)
            _add_missing_rungs(s, trial.search_id, trial.number, int(result.get("seed") or 0), result.get("rungs"))
            s.execute(update(SearchModel).where(SearchModel.id == trial.search_id).values(updated_at=utcnow()))

    @retried
    def record_rung(self, search_name: str, number: int, seed: int, result: dict) -> bool:
        """Store one rung of trial `number` (a rung result of `workers.training.train`) unless that rung and seed
        are stored already; True if this call wrote it. Rows are never replaced."""
        with self._session() as s:
            search = self._search(s, search_name)
            try:
                return _add_missing_rungs(s, search.id, number, seed, [result]) == 1
            except IntegrityError:  # another writer stored it between the look-up and the insert
                s.rollback()
                return False

    @retried
    def rungs(self, search_name: str) -> list[RungRow]:
        """Every measured rung of the search, by trial number, rung and seed."""
        r, t = RungModel, TrialModel
        columns = [
            r.number,
            r.rung,
            r.seed,
            *(getattr(r, name) for name in RUNG_FIELDS),
            t.residual,
            t.executed_flops_per_token,
        ]
        with self._session(write=False) as s:
            search = self._search(s, search_name)
            query = (
                select(*columns)
                .where(r.search_id == search.id)
                .outerjoin(t, (t.search_id == r.search_id) & (t.number == r.number))
                .order_by(r.number, r.rung, r.seed)
            )
            return [RungRow(*row) for row in s.execute(query)]

    @retried
    def mark_running_trials(self, search_name: str, status: TrialStatus, reason: str) -> int:
        """Give the search's trials still running (or waiting to retry) `status` and `reason`; return how many.

        `nas resume` marks what a dead driver left behind `interrupted` this way.
        """
        _check_status(status, FINISHED_TRIAL_STATUSES, "a finished trial's")
        pending = list(PENDING)
        with self._session() as s:
            search = self._search(s, search_name)
            done = s.execute(
                update(TrialModel)
                .where(TrialModel.search_id == search.id, TrialModel.status.in_(pending))
                .values(status=status, failure_reason=reason, finished_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            return int(done.rowcount)  # type: ignore[attr-defined]  # a CursorResult: an UPDATE

    # ---- reads (the dashboard's API: plain rows, never ORM objects) ----------------------------

    def schema_version(self) -> int:
        with self._session(write=False) as s:
            return recorded_version(s.connection())

    def get_search(self, name: str) -> SearchRow:
        with self._session(write=False) as s:
            return _search_row(self._search(s, name))

    def list_searches(self) -> list[SearchSummary]:
        """Every search, oldest first, with its trial counts and best completed val_loss."""
        t, S = TrialModel, TrialStatus
        groups = (
            (S.COMPLETED,),
            (S.FAILED,),
            (S.RUNNING, S.RETRYING),
            (S.DIVERGED, S.STOPPED, S.INFEASIBLE),
            (S.INTERRUPTED,),
        )
        counts = [func.count(case((t.status.in_(group), 1))) for group in groups]
        best = func.min(case((t.status == S.COMPLETED, t.val_loss)))
        best_bpb = func.min(case((t.status == S.COMPLETED, t.val_bpb)))
        query = (
            select(
                SearchModel.name,
                SearchModel.status,
                SearchModel.created_at,
                SearchModel.requested_trials,
                *counts,
                best,
                best_bpb,
            )
            .outerjoin(t, t.search_id == SearchModel.id)
            .group_by(SearchModel.id)
            .order_by(SearchModel.created_at, SearchModel.id)
        )
        with self._session(write=False) as s:
            return [_search_summary(*row) for row in s.execute(query)]

    def trials(self, search_name: str, statuses: Iterable[str] | None = None) -> list[TrialRow]:
        """The search's trials by number, optionally only those with one of `statuses`."""
        with self._session(write=False) as s:
            search = self._search(s, search_name)
            query = select(TrialModel).where(TrialModel.search_id == search.id).order_by(TrialModel.number)
            if statuses is not None:
                query = query.where(TrialModel.status.in_(list(statuses)))
            return [_trial_row(trial) for trial in s.scalars(query)]

    def trial(self, trial_id: int) -> TrialRow:
        with self._session(write=False) as s:
            return _trial_row(self._trial(s, trial_id))

    def count_trials(self, search_name: str, statuses: Iterable[str] | None = None) -> int:
        with self._session(write=False) as s:
            search = self._search(s, search_name)
            query = select(func.count()).select_from(TrialModel).where(TrialModel.search_id == search.id)
            if statuses is not None:
                query = query.where(TrialModel.status.in_(list(statuses)))
            return int(s.scalar(query) or 0)

    def curve(self, trial_id: int) -> list[dict]:
        """The trial's curve points by step: {step, tokens, train_loss, val_loss, training_flops}."""
        columns = [getattr(CurvePointModel, name) for name in CURVE_FIELDS]
        query = select(*columns).where(CurvePointModel.trial_id == trial_id).order_by(CurvePointModel.step)
        with self._session(write=False) as s:
            return [dict(row._mapping) for row in s.execute(query)]

    def diagnostics(self, trial_id: int) -> dict | None:
        with self._session(write=False) as s:
            row = s.get(DiagnosticsModel, trial_id)
            return None if row is None else row.diagnostics

    def width(self, trial_id: int) -> dict | None:
        """The trial's width certificate as `WidthCertificate.to_dict()` would give it, or None."""
        with self._session(write=False) as s:
            row = s.get(WidthCertificateModel, trial_id)
            return None if row is None else {name: getattr(row, name) for name in WIDTH_FIELDS}


def _search_summary(
    name: str, status: str, created_at: datetime, requested: int, *counts_and_best: Any
) -> SearchSummary:
    """A `list_searches` row: the search's columns, its five status counts, then its best loss and bpb."""
    *counts, best, best_bpb = counts_and_best
    completed, failed, running, other, interrupted = (int(c) for c in counts)
    return SearchSummary(
        name,
        SearchStatus(status),
        created_at,
        requested,
        completed,
        failed,
        running,
        other,
        interrupted,
        best_val_loss=None if best is None else float(best),
        best_val_bpb=None if best_bpb is None else float(best_bpb),
    )


def _search_row(search: SearchModel) -> SearchRow:
    return SearchRow(**{f.name: getattr(search, f.name) for f in fields(SearchRow)})


def _trial_row(trial: TrialModel) -> TrialRow:
    return TrialRow(**{f.name: getattr(trial, f.name) for f in fields(TrialRow)})


def _apply_result(trial: TrialModel, result: dict) -> None:
    """The result's status, reason and scalars onto the trial row; its arch/optim into the config."""
    trial.status, trial.failure_reason, trial.finished_at = result["status"], result.get("failure_reason"), utcnow()
    for name in RESULT_FLOAT_FIELDS:
        if name in result:
            setattr(trial, name, result[name])
    for name in RESULT_INT_FIELDS:
        if name in result:
            setattr(trial, name, _int_or_none(result[name]))
    ran = {k: result[k] for k in ("arch", "optim") if result.get(k)}
    if ran:
        trial.config = {**trial.config, **ran}
        for key, value in _arch_columns(trial.config).items():
            setattr(trial, key, value)


def _delete_children(session: Session, trial_id: int) -> None:
    for model in (CurvePointModel, DiagnosticsModel, WidthCertificateModel):
        session.execute(delete(model).where(model.trial_id == trial_id))


def _replace_children(session: Session, trial_id: int, result: dict, replace_earlier: bool) -> None:
    """The trial's curve points, diagnostics and width certificate (replacing earlier ones if any)."""
    if replace_earlier:
        _delete_children(session, trial_id)
    curve = _merged_curve(result.get("curve") or [])
    if curve:
        session.execute(insert(CurvePointModel), [{"trial_id": trial_id, **point} for point in curve])
    if result.get("diagnostics") is not None:
        session.add(DiagnosticsModel(trial_id=trial_id, diagnostics=result["diagnostics"]))
    if result.get("width") is not None:
        width = result["width"]
        session.add(WidthCertificateModel(trial_id=trial_id, **{name: width.get(name) for name in WIDTH_FIELDS}))


def _add_missing_rungs(session: Session, search_id: int, number: int, seed: int, rungs: list[dict] | None) -> int:
    """Insert the rungs not stored yet (written once: an existing row is never replaced); how many. A rung result
    that names its own `seed` (a rung measured again with another seed) is stored under it, else under `seed`."""
    added = 0
    for result in rungs or []:
        key = (search_id, number, int(result["rung"]), int(result.get("seed", seed)))
        if session.get(RungModel, key) is None:
            session.add(
                RungModel(
                    search_id=search_id,
                    number=number,
                    rung=key[2],
                    seed=key[3],
                    **{name: result.get(name) for name in RUNG_FIELDS},
                )
            )
            added += 1
    session.flush()
    return added


def _clear_for_retry(session: Session, trial: TrialModel) -> None:
    """Keep the earlier try's outcome in `previous_attempts`, and drop its results."""
    outcome = TrialStatus.FAILED if trial.status == TrialStatus.RETRYING else trial.status  # the try itself failed
    earlier = {"attempt": trial.attempt, "status": outcome, "failure_reason": trial.failure_reason}
    trial.previous_attempts = [*(trial.previous_attempts or []), earlier]
    for name in RESULT_FLOAT_FIELDS + RESULT_INT_FIELDS:
        setattr(trial, name, None)
    _delete_children(session, trial.id)
