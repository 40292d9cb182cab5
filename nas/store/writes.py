"""The store's writes: `StoreWrites`, what a search's driver and its workers record (searches, trials, their
results and rungs), each write one `with self._session()` transaction (`session.py`), most of them `retried`
while the store is unreachable."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import delete, insert, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from workers.status import PENDING, TrialStatus
from workers.training.records import CurvePoint, RungRecord
from workers.trial.contract import CountedCosts
from workers.trial.result import TrialResult

from .reads import search_row
from .rows import SearchExists, SearchRow, StoreError
from .schema import (
    ARCH_FIELDS,
    COST_FIELDS,
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
from .session import StoreSession, retried

FINISHED_TRIAL_STATUSES = tuple(s for s in TrialStatus if s != TrialStatus.RUNNING)


class StoreWrites(StoreSession):
    """Every write to the store."""

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
            return search_row(search)

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
        self,
        search_name: str,
        *,
        number: int,
        attempt: int = 0,
        config: dict,
        optuna_trial_number: int | None = None,
        costs: CountedCosts | None = None,
    ) -> int:
        """Record trial `number` as running, with its config and its counted `costs` (`TrialTicket.costs`: known
        before any training, so that rung promotion compares running trials on them); return its id.

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
                **{name: getattr(costs, name) if costs is not None else None for name in COST_FIELDS},
                **_arch_columns(config),
            ).items():
                setattr(trial, key, value)
            s.flush()
            _touch(s, search.id)
            return trial.id

    @retried
    def finish_trial(self, trial_id: int, result: TrialResult) -> None:
        """Store `result`: its status, reason and scalars, its curve, diagnostics and width, and the rungs the store
        lacks, in one transaction. The result's `arch`/`optim` (what actually ran) replace those of the config.
        Finishing twice replaces."""
        _check_status(result.status, FINISHED_TRIAL_STATUSES, "a finished trial's")
        with self._session() as s:
            trial = self._trial(s, trial_id)
            finishing_again = trial.finished_at is not None  # else no child rows exist (a retry cleared them)
            _apply_result(trial, result)
            _replace_children(s, trial_id, result, finishing_again)
            _add_missing_rungs(s, trial.search_id, trial.number, result.rungs)
            _touch(s, trial.search_id)

    @retried
    def record_rung(self, search_name: str, number: int, rung: RungRecord) -> bool:
        """Store one rung of trial `number` unless that rung and seed are stored already; True if this call wrote
        it. Rows are never replaced."""
        with self._session() as s:
            search = self._search(s, search_name)
            try:
                added = _add_missing_rungs(s, search.id, number, [rung]) == 1
            except IntegrityError:  # another writer stored it between the look-up and the insert
                s.rollback()
                return False
            _touch(s, search.id)
            return added

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


def _touch(session: Session, search_id: int) -> None:
    """Mark the search as written now (`Store.last_write`: what a cached answer is keyed by)."""
    session.execute(update(SearchModel).where(SearchModel.id == search_id).values(updated_at=utcnow()))


def _arch_columns(config: dict) -> dict:
    """The denormalised architecture columns, from config["arch"] (or a flat config)."""
    nested = config.get("arch")
    arch = nested if isinstance(nested, dict) else config
    return {name: arch.get(name) for name in ARCH_FIELDS}


def _merged_curve(points: Iterable[CurvePoint]) -> list[dict]:
    """Curve rows keyed by step; a repeated step merges into one row (later non-null values win)."""
    rows: dict[int, dict] = {}
    for point in points:
        row = rows.setdefault(point.step, dict.fromkeys(CURVE_FIELDS))
        row.update({k: getattr(point, k) for k in CURVE_FIELDS if getattr(point, k) is not None})
    return list(rows.values())


def _check_status(status: Any, allowed: Iterable[str], what: str) -> None:
    allowed = [str(a) for a in allowed]
    if status not in allowed:
        raise ValueError(f"{what} status must be one of {', '.join(allowed)}, not {status!r}")


def _apply_result(trial: TrialModel, result: TrialResult) -> None:
    """The result's status, reason and scalars onto the trial row; its arch/optim into the config."""
    trial.status, trial.failure_reason, trial.finished_at = result.status, result.failure_reason, utcnow()
    for name in RESULT_FLOAT_FIELDS + RESULT_INT_FIELDS:
        setattr(trial, name, getattr(result, name))
    ran = {k: v.model_dump() for k, v in (("arch", result.arch), ("optim", result.optim)) if v is not None}
    if ran:
        trial.config = {**trial.config, **ran}
        for key, value in _arch_columns(trial.config).items():
            setattr(trial, key, value)


def _delete_children(session: Session, trial_id: int) -> None:
    for model in (CurvePointModel, DiagnosticsModel, WidthCertificateModel):
        session.execute(delete(model).where(model.trial_id == trial_id))


def _replace_children(session: Session, trial_id: int, result: TrialResult, replace_earlier: bool) -> None:
    """The trial's curve points, diagnostics and width certificate (replacing earlier ones if any)."""
    if replace_earlier:
        _delete_children(session, trial_id)
    curve = _merged_curve(result.curve)
    if curve:
        session.execute(insert(CurvePointModel), [{"trial_id": trial_id, **point} for point in curve])
    if result.diagnostics:
        session.add(DiagnosticsModel(trial_id=trial_id, diagnostics=result.diagnostics))
    if result.width is not None:
        width = {name: getattr(result.width, name) for name in WIDTH_FIELDS}
        session.add(WidthCertificateModel(trial_id=trial_id, **width))


def _add_missing_rungs(session: Session, search_id: int, number: int, rungs: Sequence[RungRecord]) -> int:
    """Insert the rungs not stored yet, each under its own seed (written once: an existing row is never
    replaced); how many."""
    added = 0
    for rung in rungs:
        key = (search_id, number, rung.rung, rung.seed)
        if session.get(RungModel, key) is None:
            session.add(
                RungModel(
                    search_id=search_id,
                    number=number,
                    rung=rung.rung,
                    seed=rung.seed,
                    **{name: getattr(rung, name) for name in RUNG_FIELDS},
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
