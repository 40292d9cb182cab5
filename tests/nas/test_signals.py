"""Ctrl-C and SIGTERM sent for real to a real `nas search`: the store is left resumable, nothing lost or doubled."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from test_search import nas_args, run, trial_rows, wait_for

from nas.search.study import optuna_storage
from nas.store import Store
from workers.status import FINAL

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]


def rung_count(url: str, name: str) -> int:
    if not trial_rows(url, name):
        return 0
    with Store(url) as store:
        return len(store.rungs(name))


def optuna_states(url: str, store: Store, name: str) -> list[str]:
    study = optuna.load_study(study_name=store.get_search(name).optuna_study_name, storage=optuna_storage(url))
    return [t.state.name for t in study.trials]


@pytest.fixture
def driver_group():
    """A driver started in its own session (as a terminal's foreground job), its group killed at the end."""
    started: list[subprocess.Popen] = []

    def start(args, cwd) -> subprocess.Popen:
        proc = subprocess.Popen(
            args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the driver's group: itself and the Ray it started
        except (ProcessLookupError, PermissionError):
            pass


def test_ctrl_c_stops_at_the_next_rung_and_resume_completes_without_loss(tmp_path, driver_group):
    url, name = f"sqlite:///{tmp_path / 'r.db'}", "sigint"
    # Three rungs, so that the first trial at a rung (always promoted) has a next rung short of its last: it
    # must stop there, interrupted, instead of finishing. Small budgets, 2 trials, no repeats: what is checked
    # is the stop and the resume, not the answer.
    args = nas_args(name, url, trials=2, flops="1e9", rungs=3, eta=2, repeat_seeds=0)
    driver = driver_group([*args, "--stop-grace", "120"], tmp_path)
    wait_for(lambda: rung_count(url, name) >= 1)
    os.killpg(driver.pid, signal.SIGINT)  # what Ctrl-C at a terminal does: the whole foreground group
    started = time.monotonic()
    _, err = driver.communicate(timeout=300)
    assert driver.returncode == 128 + signal.SIGINT, err[-3000:]
    assert time.monotonic() - started < 120  # each trial stopped at its next rung, before the grace ran out
    last = err.strip().splitlines()[-1]
    assert "stopped by SIGINT" in last and f"nas resume {name}" in last

    with Store(url) as store:
        assert store.get_search(name).status == "interrupted"
        rows = store.trials(name)
        assert rows and {r.status for r in rows} <= {"completed", "interrupted"}  # nothing left running
        stopped = [r for r in rows if r.status == "interrupted"]
        assert stopped, "no trial was stopped at its next rung: they ran to their end"
        assert all("stopped" in (r.failure_reason or "") for r in stopped)
        rungs_before = {(g.number, g.rung, g.seed): g.val_loss for g in store.rungs(name)}
        completed_before = {r.number: r.val_loss for r in rows if r.status == "completed"}
        assert "RUNNING" not in optuna_states(url, store, name)
    assert rungs_before  # the interrupted trials' measured rungs are kept

    run([sys.executable, "-m", "nas.cli", "resume", name, "--storage", url, "--no-progress"], tmp_path)
    with Store(url) as store:
        rows = store.trials(name)
        assert store.get_search(name).status == "completed"
        rungs_after = {(g.number, g.rung, g.seed): g.val_loss for g in store.rungs(name)}
        states = optuna_states(url, store, name)
    completed = {r.number: r.val_loss for r in rows if r.status == "completed"}
    assert all(completed[n] == v for n, v in completed_before.items())  # nothing rewritten
    assert sum(r.status in FINAL for r in rows) == 2, [(r.status, r.failure_reason) for r in rows]
    assert all(rungs_after[k] == v for k, v in rungs_before.items())
    assert len(rows) == len({r.number for r in rows})  # no trial number twice
    assert_optuna_agrees(rows, states)


def assert_optuna_agrees(rows, states: list[str]) -> None:
    """Each stored trial's Optuna trial: told its objectives if it ended with them, FAIL if it failed or
    was cut short, never left RUNNING."""
    assert "RUNNING" not in states
    for r in rows:
        expected = "FAIL" if r.status in ("failed", "interrupted") else "COMPLETE"
        assert states[r.optuna_trial_number] == expected, (r.number, r.status, r.failure_reason)


def test_a_second_sigterm_stops_at_once_and_leaves_a_resumable_store(tmp_path, driver_group):
    url, name = f"sqlite:///{tmp_path / 'r.db'}", "sigterm"
    driver = driver_group([*nas_args(name, url, trials=6, flops="5e9"), "--stop-grace", "600"], tmp_path)
    wait_for(lambda: rung_count(url, name) >= 1)
    driver.send_signal(signal.SIGTERM)  # a scheduler preempting the driver
    time.sleep(1.0)
    driver.send_signal(signal.SIGTERM)
    started = time.monotonic()
    _, err = driver.communicate(timeout=120)
    assert driver.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert time.monotonic() - started < 60  # far inside the 600 s grace: the second signal did not wait
    assert "stopped by SIGTERM" in err.strip().splitlines()[-1]
    with Store(url) as store:
        assert store.get_search(name).status == "interrupted"
        assert {r.status for r in store.trials(name)} <= {"completed", "interrupted"}
        assert "RUNNING" not in optuna_states(url, store, name)
