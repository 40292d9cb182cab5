"""Readers beside a writer on one SQLite store: no "database is locked", and every completed trial is seen.

The writer is a real second process writing trials as a search's driver does (start, rungs, finish);
the readers are what the dashboard and `nas show` call, in a loop, in this process.
"""

from __future__ import annotations

import multiprocessing
import time

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from nas.cli import app
from nas.store import Store, default_url
from workers.training.records import CurvePoint, RungRecord
from workers.trial.contract import CountedCosts
from workers.trial.result import TrialResult

TRIALS = 60


def write_trials(url: str, name: str, n: int) -> None:
    """A driver's writes, one transaction each: start the trial, store its rung, finish it."""
    with Store(url) as store:
        for number in range(n):
            config = {"arch": {"residual": "nag", "n_layers": 2, "d_model": 32}}
            trial = store.start_trial(name, number=number, config=config, costs=CountedCosts(1e5))
            store.record_rung(name, number, RungRecord(0, 0, 1e9, 10, 1000, 2.0, 1e9))
            result = TrialResult.loss_only(2.0 - number / 1000, 1e5)
            result.curve = [CurvePoint(s, 100 * s, 3.0 - 0.01 * s, 1e6 * s, 1e-3, 20) for s in range(20)]
            store.finish_trial(trial, result)


@pytest.mark.slow
def test_readers_see_every_completed_trial_while_a_writer_writes(tmp_path):
    url, name = default_url(tmp_path), "busy"
    with Store(url) as store:
        store.create_search(
            name, requested_trials=TRIALS, budget={}, space={}, settings={}, optuna_study_name=None, code_version=None
        )
    writer = multiprocessing.get_context("spawn").Process(target=write_trials, args=(url, name, TRIALS))
    writer.start()
    runner, reads, seen = CliRunner(), 0, 0
    try:
        while writer.is_alive() or reads == 0:
            with Store(url) as store:  # the dashboard's reads
                store.list_searches()
                rows = store.trials(name)
                store.rungs(name)
                if rows:
                    store.curve(rows[-1].id)
            completed = [r for r in rows if r.status == "completed"]
            assert len(completed) >= seen  # a reader never sees fewer than before
            seen = len(completed)
            shown = runner.invoke(app, ["status", name, "--storage", url])  # and the CLI's
            assert shown.exit_code == 0, shown.output
            assert "locked" not in shown.output
            reads += 1
            time.sleep(0.01)
    finally:
        writer.join(timeout=120)
    assert writer.exitcode == 0  # the writer never failed on a lock either
    with Store(url) as store:
        assert sum(r.status == "completed" for r in store.trials(name)) == TRIALS
    assert reads > 3  # the reads really overlapped the writes
    engine = create_engine(url)
    with engine.connect() as db:
        assert db.execute(text("PRAGMA journal_mode")).scalar() == "wal"  # what lets readers and a writer overlap
    engine.dispose()
