"""A real PostgreSQL server restarted while a driver writes: every write lands exactly once, after retries.

The server is this test's own (restarting the session's would break other tests); the writes are a
search driver's and its workers' (start a trial, store its rung, finish it), from a second thread.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
import time

import pytest

from nas.store import Store, StoreError
from postgres_server import LocalPostgres, PostgresUnavailable, create_database
from workers.status import FINAL
from workers.training.records import RungRecord
from workers.trial.contract import CountedCosts
from workers.trial.result import TrialResult

TRIALS = 30

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def own_server():
    server = LocalPostgres(tempfile.mkdtemp(prefix="resnas-pg-outage-"), remove_on_stop=True)
    try:
        admin = server.start()
    except (PostgresUnavailable, OSError) as err:
        server.stop()
        pytest.skip(f"no PostgreSQL: {err}")
    yield server, create_database(admin)
    server.stop()


def drive(store: Store, name: str, written: list[int], errors: list[BaseException]) -> None:
    try:
        for number in range(TRIALS):
            trial = store.start_trial(name, number=number, config={}, costs=CountedCosts(1e5))
            store.record_rung(name, number, RungRecord(0, 0, 1e9, 10, 1000, 2.0, 1e9))
            store.finish_trial(trial, TrialResult.loss_only(2.0 + number, 1e5))
            written.append(number)
            time.sleep(0.05)
    except BaseException as err:  # reported by the test
        errors.append(err)


def test_writes_retry_through_a_server_restart_and_land_exactly_once(own_server, caplog):
    server, url = own_server
    store = Store(url, retry_seconds=60)
    store.create_search(
        "outage", requested_trials=TRIALS, budget={}, space={}, settings={}, optuna_study_name=None, code_version=None
    )
    written: list[int] = []
    errors: list[BaseException] = []
    writer = threading.Thread(target=drive, args=(store, "outage", written, errors))
    with caplog.at_level(logging.WARNING, logger="nas.store.access"):
        writer.start()
        while len(written) < 5 and writer.is_alive():
            time.sleep(0.05)
        server.restart(down_seconds=3.0)  # every connection dropped, no server for 3 s
        writer.join(timeout=200)
    assert not errors, errors
    assert written == list(range(TRIALS))
    rows = store.trials("outage")
    assert [r.number for r in rows] == list(range(TRIALS))  # each trial exactly once
    assert all(r.status == "completed" and r.val_loss == 2.0 + r.number for r in rows)
    assert [(g.number, g.rung) for g in store.rungs("outage")] == [(n, 0) for n in range(TRIALS)]
    assert any("unreachable" in m and "retrying" in m for m in caplog.messages)  # the user was told
    store.close()


def test_a_store_down_longer_than_the_window_fails_the_write_in_one_line(own_server):
    server, url = own_server
    store = Store(url, retry_seconds=2)
    store.create_search(
        "down", requested_trials=1, budget={}, space={}, settings={}, optuna_study_name=None, code_version=None
    )
    server.stop()
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"unreachable for \d+ s") as err:
        store.start_trial("down", number=0, config={})
    assert "\n" not in str(err.value)
    assert 2 <= time.monotonic() - started < 30
    store.close()


def test_a_search_survives_a_server_restart_with_every_trial_and_rung_once(own_server, tmp_path):
    import subprocess

    import optuna
    from test_search import nas_args, wait_for
    from test_signals import assert_optuna_agrees

    from nas.search.study import optuna_storage

    server, url = own_server
    # 4 small trials, 2 at a time, no repeats: the restart comes after the first completes, while the rest
    # run and start (their rung and trial writes), and the search must finish them all.
    driver = subprocess.Popen(
        nas_args("restart", url, trials=4, flops="1e9", rungs=2, eta=2, repeat_seeds=0),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def completed() -> int:
            try:
                with Store(url) as store:
                    return sum(r.status == "completed" for r in store.trials("restart"))
            except StoreError:
                return 0

        wait_for(completed, timeout=240)
        server.restart(down_seconds=3.0)
        _, err = driver.communicate(timeout=400)
    finally:
        driver.kill()
    assert driver.returncode == 0, err[-4000:]
    with Store(url) as store:
        rows = store.trials("restart")
        rungs = [(g.number, g.rung, g.seed) for g in store.rungs("restart")]
        study = optuna.load_study(study_name=store.get_search("restart").optuna_study_name, storage=optuna_storage(url))
    assert len(rows) == len({r.number for r in rows})  # each trial once
    assert sum(r.status in FINAL for r in rows) == 4, [(r.status, r.failure_reason) for r in rows]
    assert len(rungs) == len(set(rungs))  # each rung once
    assert {n for n, _, _ in rungs} <= {r.number for r in rows}
    assert {n for n, _, _ in rungs} >= {r.number for r in rows if r.status == "completed"}
    assert_optuna_agrees(rows, [t.state.name for t in study.trials])


def test_a_store_down_past_the_window_keeps_results_on_disk_and_resume_writes_them_once(
    own_server, tmp_path, monkeypatch
):
    """The driver's results outlive an outage longer than the retry window: kept in the spool, the search
    stops launching trials and exits 75 in one line, and `nas resume` writes them exactly once."""
    import os
    import subprocess

    import optuna
    from test_search import nas_args, wait_for
    from test_signals import assert_optuna_agrees

    from nas.search.spool import spool_path
    from nas.search.study import optuna_storage

    server, url = own_server
    monkeypatch.setenv("RESNAS_SPOOL", str(tmp_path / "spool"))
    env = {**os.environ, "RESNAS_STORE_RETRY_SECONDS": "3"}
    args = [*nas_args("spooled", url, trials=6, flops="5e9"), "--rungs", "1"]
    driver = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:

        def started() -> int:
            try:
                with Store(url) as store:
                    rows = store.trials("spooled")
                    return sum(r.status == "completed" for r in rows) >= 1 and any(r.status == "running" for r in rows)
            except StoreError:
                return 0

        wait_for(started, timeout=240, every=0.1)
        server.pause()  # down until the driver has given up on it
        _, err = driver.communicate(timeout=300)
    finally:
        driver.kill()
    assert driver.returncode == 75, err[-4000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: search 'spooled': the store stayed unreachable") and "nas resume spooled" in last
    spool = spool_path(url, "spooled")
    kept = spool.read_text().splitlines() if spool.exists() else []
    server.resume()
    done = subprocess.run(
        [*args[:3], "resume", "spooled", "--storage", url, "--no-progress"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert kept and not spool.exists()  # writes were kept during the outage, and every one landed
    with Store(url) as store:
        rows = store.trials("spooled")
        study = optuna.load_study(study_name=store.get_search("spooled").optuna_study_name, storage=optuna_storage(url))
    print(f"kept in the spool during the outage: {[json.loads(line)['op'] for line in kept]}")
    assert len(rows) == len({r.number for r in rows})  # each trial once
    assert sum(r.status in FINAL for r in rows) == 6, [(r.status, r.failure_reason) for r in rows]
    finished = {json.loads(line)["trial_id"] for line in kept if json.loads(line)["op"] == "finish_trial"}
    assert all(r.status == "completed" for r in rows if r.id in finished)  # kept results, not re-runs
    assert_optuna_agrees(rows, [t.state.name for t in study.trials])
