"""Where the store is, and short-lived cached reads of it through `nas.store.Store`'s read API.

The store URL comes, first found wins, from `--storage URL` after `--` on the `streamlit run`
line, the environment variable `RESNAS_STORAGE`, or `sqlite:///resnas.db` in the working
directory (`nas.store.default_url`). Reads are cached for `TTL_S` seconds, keyed by URL and
arguments, so a page refresh every `REFRESH_S` seconds sees new trials. Nothing here writes: a
SQLite file that does not exist is reported, not created.

The search's answer at a target budget is `nas.search_answer.search_answer`'s, the one `nas show` and `nas export`
read: computed once per write to the search, kept until the store's next write to it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from importlib import resources
from pathlib import Path

import streamlit as st
from sqlalchemy.engine import make_url

from nas.answer.backtest import Backtest
from nas.answer.target import Answer, Prediction, answer_at_target
from nas.search_answer import SearchAnswer
from nas.search_answer import search_answer as answer_of_search
from nas.space.budget import Budget, BudgetError, stored_budget
from nas.store import (
    STORAGE_ENV,
    CurvePointRow,
    RungRow,
    SearchRow,
    SearchSummary,
    Store,
    StoreError,
    TrialRow,
    default_url,
)
from nas.store.engine import sqlite_file
from workers.status import TrialStatus
from workers.trial.result import WidthCertificate

FIDELITY_ENV = "RESNAS_FIDELITY_JSON"  # the fidelity benchmark's JSON (`make fidelity`), if not the shipped one
SHIPPED_FIDELITY = resources.files("dashboard").joinpath("fidelity_summary.json")  # package data, from make fidelity
TTL_S = 3.0  # cache lifetime of store reads (seconds)
REFRESH_S = 5.0  # live refresh period of pages showing a running search


def storage_url(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None, cwd: str | Path | None = None
) -> str:
    """`--storage URL` (or `--storage=URL`) in argv, else $RESNAS_STORAGE, else resnas.db in cwd."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    for i, arg in enumerate(argv):
        if arg == "--storage" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--storage="):
            return arg.split("=", 1)[1]
    environ = os.environ if environ is None else environ
    return environ.get(STORAGE_ENV) or default_url(Path.cwd() if cwd is None else cwd)


def missing_sqlite_file(url: str) -> Path | None:
    """The file of a file-backed SQLite URL that does not exist (opening it would create it), else None."""
    path = sqlite_file(url)
    return None if path is None or path.exists() else path


@st.cache_resource(show_spinner=False)
def store(url: str) -> Store:
    """One read-only `Store` per URL for the server's lifetime (its engine pools connections across sessions): the
    dashboard reads a store as it is, never creating, upgrading or writing one."""
    missing = missing_sqlite_file(url)
    if missing is not None:
        raise StoreError(f"no store at {missing}: run `nas search` first, or pass --storage URL")
    return Store(url, read_only=True)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def list_searches(url: str) -> list[SearchSummary]:
    return store(url).list_searches()


@st.cache_data(ttl=TTL_S, show_spinner=False)
def get_search(url: str, name: str) -> SearchRow:
    return store(url).get_search(name)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def trials(url: str, name: str) -> list[TrialRow]:
    return store(url).trials(name)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def rungs(url: str, name: str) -> list[RungRow]:
    """Every measured rung of the search (empty for a search that measured none)."""
    return store(url).rungs(name)


TOP_REACHED = None  # `rows_at_rung`: each trial at the top rung it reached (budgets then differ between trials)


def rows_at_rung(rows: Sequence[TrialRow], rung_rows: Sequence[RungRow], rung: int | None) -> list[TrialRow]:
    """The trials as measured at ladder rung `rung`: each completed trial's loss there (its own run: the
    lowest seed, as repeats of the front add higher ones), and completed trials that never reached it
    left out, so a front compares losses at one budget. Trials that did not complete are kept as they
    are; `rung=TOP_REACHED`, or a search without rung rows (a single budget), gives `rows` unchanged."""
    if rung is TOP_REACHED or not rung_rows:
        return list(rows)
    loss: dict[int, float | None] = {}
    for r in sorted((r for r in rung_rows if r.rung == rung), key=lambda r: -r.seed):
        loss[r.number] = r.val_loss  # the lowest seed written last
    out = []
    for row in rows:
        if row.status != TrialStatus.COMPLETED:
            out.append(row)
        elif (at := loss.get(row.number)) is not None:
            out.append(replace(row, val_loss=at, val_bpb=at * bpb_per_nat(row)))
    return out


def in_bits_per_byte(row: TrialRow) -> TrialRow:
    """The row with its val_loss in bits per byte (for figures that compare tokenizers)."""
    return replace(row, val_loss=row.val_loss * bpb_per_nat(row)) if row.val_loss is not None else row


def tokenizer_spec(url: str, name: str) -> str:
    """The tokenizer search `name` trained with, as given to `nas search --tokenizer` (bytes if unrecorded)."""
    settings = get_search(url, name).settings or {}
    return (settings.get("corpus") or {}).get("tokenizer_spec", "bytes")


def bpb_per_nat(row: TrialRow) -> float:
    """Bits per byte per nat of loss of a completed trial: its val_bpb / val_loss, the exact ratio of its
    held-out set (every rung is evaluated on the same set); 1 / ln 2 for byte tokens."""
    if row.val_bpb is not None and row.val_loss and math.isfinite(row.val_loss) and math.isfinite(row.val_bpb):
        return row.val_bpb / row.val_loss
    return 1 / math.log(2)


def budget(url: str, name: str) -> Budget | str:
    """The search's stored Budget (its target T, rungs and eta), or why it cannot be read."""
    try:
        return stored_budget(get_search(url, name).budget or {})
    except (BudgetError, TypeError) as err:
        return f"its stored budget cannot be read ({err})"


def search_answer(url: str, name: str, target: float) -> SearchAnswer:
    """The search's answer at `target` training FLOPs: its predictions, front, hypervolume and what it rests on
    (`nas.search_answer`, kept until the store's next write to the search)."""
    return answer_of_search(store(url), name, target)


def answer(url: str, name: str, target: float) -> Answer:
    """The search's answer at `target` training FLOPs from all its rungs (`nas.answer.target.answer_at_target`)."""
    found = search_answer(url, name, target).answer
    return found if found is not None else answer_at_target([], target)


def predictions(url: str, name: str, target: float) -> dict[int, Prediction]:
    """Each trial's predicted loss at `target`, its band, held-out error and basis."""
    return answer(url, name, target).predictions


def backtest(url: str, name: str, target: float) -> Backtest:
    """Which predictor the search answers with at `target`, and its backtest (`nas.answer.backtest`)."""
    return answer(url, name, target).backtest


def fit_params(url: str, name: str, target: float) -> dict[int, tuple[float, float, float, str]]:
    """Each trial's (E, A, alpha, group) of L = E + A C^-alpha: the search's curve, with A as its predictor set
    it ({} without a finite rung)."""
    return answer(url, name, target).curves


@st.cache_data(ttl=TTL_S, show_spinner=False)
def curve(url: str, trial_id: int) -> list[CurvePointRow]:
    return store(url).curve(trial_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def diagnostics(url: str, trial_id: int) -> dict | None:
    return store(url).diagnostics(trial_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def width(url: str, trial_id: int) -> WidthCertificate | None:
    return store(url).width(trial_id)


def widths(url: str, name: str) -> list[tuple[TrialRow, WidthCertificate]]:
    """(trial, width certificate) of the search's completed trials that have one."""
    pairs = [(row, width(url, row.id)) for row in trials(url, name) if row.status == TrialStatus.COMPLETED]
    return [(row, cert) for row, cert in pairs if cert is not None]


def fidelity_benchmark(environ: Mapping[str, str] | None = None) -> dict | None:
    """The summary of the fidelity benchmark's JSON ($RESNAS_FIDELITY_JSON, else the summary shipped as
    package data, `dashboard/fidelity_summary.json`), or None where there is none."""
    environ = os.environ if environ is None else environ
    path = Path(environ[FIDELITY_ENV]) if environ.get(FIDELITY_ENV) else SHIPPED_FIDELITY
    try:
        return json.loads(path.read_text())["summary"]
    except (OSError, ValueError, KeyError):
        return None


def display_url(url: str) -> str:
    """`url` with any password hidden, for showing on the page."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "(unparsable URL)"
