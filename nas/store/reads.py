"""The store's reads: `StoreReads`, the dashboard's and the CLI's API, plain rows (`rows.py`) and never ORM
objects, each read one `with self._session(write=False)` block (`session.py`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select

from workers.status import TrialStatus
from workers.trial.result import WidthCertificate

from .migrations import recorded_version
from .rows import CurvePointRow, RungRow, SearchRow, SearchSummary, TrialRow
from .schema import (
    CURVE_FIELDS,
    RUNG_FIELDS,
    WIDTH_FIELDS,
    CurvePointModel,
    DiagnosticsModel,
    RungModel,
    SearchModel,
    SearchStatus,
    TrialModel,
    WidthCertificateModel,
)
from .session import StoreSession, retried


class StoreReads(StoreSession):
    """Every read of the store."""

    @retried  # workers read the rungs while a search runs: it waits out an outage like a write
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
            t.kv_bytes_per_token,
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

    def schema_version(self) -> int:
        with self._session(write=False) as s:
            return recorded_version(s.connection())

    def last_write(self, name: str) -> datetime:
        """When search `name` was last written (a trial started or finished, a rung stored, its status set): what
        an answer computed from its rows stays valid until (`nas.search_answer`)."""
        with self._session(write=False) as s:
            return self._search(s, name).updated_at

    def get_search(self, name: str) -> SearchRow:
        with self._session(write=False) as s:
            return search_row(self._search(s, name))

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
            return [trial_row(trial) for trial in s.scalars(query)]

    def trial(self, trial_id: int) -> TrialRow:
        with self._session(write=False) as s:
            return trial_row(self._trial(s, trial_id))

    def count_trials(self, search_name: str, statuses: Iterable[str] | None = None) -> int:
        with self._session(write=False) as s:
            search = self._search(s, search_name)
            query = select(func.count()).select_from(TrialModel).where(TrialModel.search_id == search.id)
            if statuses is not None:
                query = query.where(TrialModel.status.in_(list(statuses)))
            return int(s.scalar(query) or 0)

    def curve(self, trial_id: int) -> list[CurvePointRow]:
        """The trial's curve points by step."""
        columns = [getattr(CurvePointModel, name) for name in CURVE_FIELDS]
        query = select(*columns).where(CurvePointModel.trial_id == trial_id).order_by(CurvePointModel.step)
        with self._session(write=False) as s:
            return [CurvePointRow(*row) for row in s.execute(query)]

    def diagnostics(self, trial_id: int) -> dict | None:
        with self._session(write=False) as s:
            row = s.get(DiagnosticsModel, trial_id)
            return None if row is None else row.diagnostics

    def width(self, trial_id: int) -> WidthCertificate | None:
        """The trial's width certificate, or None."""
        with self._session(write=False) as s:
            row = s.get(WidthCertificateModel, trial_id)
            return None if row is None else WidthCertificate(**{name: getattr(row, name) for name in WIDTH_FIELDS})


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


def search_row(search: SearchModel) -> SearchRow:
    return SearchRow(**{f.name: getattr(search, f.name) for f in fields(SearchRow)})


def trial_row(trial: TrialModel) -> TrialRow:
    return TrialRow(**{f.name: getattr(trial, f.name) for f in fields(TrialRow)})
