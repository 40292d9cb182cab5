"""Searches end to end on a real local Ray cluster and a real store, and the faults they survive.

Each test runs `nas` as its own process (its own local Ray, on 127.0.0.1) over a space of tiny
models, so a trial takes a second or two. Faults are caused for real: SIGKILL of a trial's Ray
worker, SIGKILL of the driver, NaN losses, two drivers writing one store. The search, the fault
and the two-driver tests run on both stores (a SQLite file, a PostgreSQL database, with the Optuna
study in the same database); the others on SQLite. The end-to-end search on SQLite is the session's
finished search (`finished_search`, conftest.py), which every test that only reads one shares. Every
process a test starts is stopped by PID, and only those.
"""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import psutil
import pytest
from typer.testing import CliRunner

from nas.cli import app
from nas.search.study import optuna_storage
from nas.store import Store, UnknownSearch
from searches import FinishedSearch, nas_args, run

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]  # real Ray searches: 30-100 s each


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path) -> str:
    """A fresh store on each backend: a SQLite file (not created yet), an empty PostgreSQL database."""
    return f"sqlite:///{tmp_path / 'r.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_url")


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'r.db'}"


class Started:
    """Processes started by a test, stopped by PID (and their descendants, e.g. Ray's daemons)."""

    def __init__(self):
        self.pids: set[int] = set()

    def popen(self, args: list[str], cwd: Path) -> subprocess.Popen:
        proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.pids.add(proc.pid)
        return proc

    def remember_descendants(self, pid: int) -> list[psutil.Process]:
        kids = psutil.Process(pid).children(recursive=True)
        self.pids.update(k.pid for k in kids)
        return kids

    def stop_all(self) -> None:
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@pytest.fixture
def started():
    procs = Started()
    yield procs
    procs.stop_all()


def wait_for(condition, timeout: float = 300, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("timed out waiting")


def assert_listening_on_loopback_only(pids: list[int]) -> None:
    """Every socket the driver and its Ray processes listen on is bound to 127.0.0.1."""
    listening = []
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        listening += [c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN]
    assert listening, "found no listening sockets to check"
    assert set(listening) <= {"127.0.0.1", "::ffff:127.0.0.1"}, listening


def trial_rows(url: str, name: str) -> list:
    """The search's trial rows, or [] while the driver has not created the SQLite file or the search yet."""
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return []
    try:
        with Store(url) as store:
            return store.trials(name)
    except UnknownSearch:
        return []


def final_rows(url: str, name: str):
    return [r for r in trial_rows(url, name) if r.status != "running"]


def optuna_study(url: str, store: Store, name: str) -> optuna.Study:
    return optuna.load_study(study_name=store.get_search(name).optuna_study_name, storage=optuna_storage(url))


@pytest.fixture(params=["sqlite", "postgresql"])
def e2e(request, tmp_path) -> FinishedSearch:
    """The end-to-end search: on SQLite the session's finished search (conftest.py), read as every test that reads
    one does; on PostgreSQL the same search, run here into an empty database (with its Optuna study)."""
    if request.param == "sqlite":
        return request.getfixturevalue("finished_search")
    return FinishedSearch.run(request.getfixturevalue("postgres_url"), tmp_path)


def test_search_end_to_end_then_show_list_status(e2e, tmp_path):
    url, said = e2e.url, e2e.stdout  # what `nas search` printed
    target = f"T = {e2e.target:.3g} training FLOPs"
    assert f"Pareto front at the target, {target}" in said and "hypervolume" in said
    # what its losses are, said once: carried to T by the ladder's own curve, or the top rungs' where none fitted
    assert ("replica ladder; predictor: " in said) != ("no loss at T: the table ranks by" in said)
    assert said.count("layout: ") == 1  # the plan's lines before training, not again in the answer
    assert f"layout: {e2e.rungs} rungs at eta {e2e.eta}, as asked (--rungs/--eta)" in said  # a ladder asked for is kept
    assert "replicas: head size kept, no narrower than 0.5 d_T" in " ".join(said.split())
    with Store(url) as store:
        rows = store.trials("e2e")
        rungs = store.rungs("e2e")
        assert len(rows) == e2e.trials and {r.status for r in rows} == {"completed"}
        assert all(math.isfinite(r.val_loss) and r.tokens_seen > 0 and r.executed_flops_per_token > 0 for r in rows)
        assert store.curve(rows[0].id) and store.diagnostics(rows[0].id)
        assert store.get_search("e2e").status == "completed"
        study = optuna_study(url, store, "e2e")
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * e2e.trials
    # The ladder: every trial measured at the lowest rung, rungs climbed in order, the first trial promoted
    # (it is the best of one), each rung at its iso-FLOP budget, and the trial's loss its last rung's.
    reached = {r.number: [g.rung for g in rungs if g.number == r.number and g.seed == 0] for r in rows}
    assert all(climbed == list(range(len(climbed))) and climbed for climbed in reached.values())
    assert max(len(c) for c in reached.values()) >= 2
    assert all(g.budget_flops == pytest.approx(float(e2e.flops) * e2e.eta**g.rung) for g in rungs)
    for r in rows:  # the trial's loss: its last rung's, the seed mean where that rung was measured again
        last = max(reached[r.number])
        seeds = [g.val_loss for g in rungs if (g.number, g.rung) == (r.number, last) and g.seed in (0, 1000)]
        assert r.val_loss == pytest.approx(sum(seeds) / len(seeds), rel=1e-12)
    # Each rung a replica: no wider than the trial, recording its tokens per parameter against the target's.
    trial_width = {r.number: r.d_model for r in rows}
    assert all(g.d_model <= trial_width[g.number] and g.tokens_per_param > 0 for g in rungs)
    assert all(g.target_tokens_per_param > 0 and g.on_path in (True, False) for g in rungs)
    assert all(math.isfinite(t.values[0]) for t in study.trials)  # told the predicted loss at the target
    for t in study.trials:  # with its band (None while too few held-out rungs calibrate one) and rungs climbed
        band = t.user_attrs["target_loss_band"]
        assert band is None or band[0] <= t.values[0] <= band[1]
        assert t.user_attrs["rungs_climbed"] == len(reached[t.number])
    # the front at the target measured again with a second seed (1); rungs the decider asked to measure again, 1000
    assert {0, 1} <= {g.seed for g in rungs} <= {0, 1, 1000}
    # the search's learning-rate schedule: stored with it, and what every trial ran
    with Store(url) as store:
        assert {k: store.get_search("e2e").space["fixed"][k] for k in ("schedule", "cooldown")} == {
            "schedule": "wsd",
            "cooldown": 0.2,
        }
    assert all(r.config["optim"]["schedule"] == "wsd" for r in rows)
    assert "seed noise" in said
    assert sorted(t.number for t in study.trials) == sorted(r.optuna_trial_number for r in rows)
    shown = run([sys.executable, "-m", "nas.cli", "show", "e2e", "--pareto", "--storage", url], tmp_path)
    assert "Pareto front" in shown.stdout and "80% band" in shown.stdout
    assert max(len(line) for line in shown.stdout.splitlines()) <= 120  # the compact table, outside a terminal
    # what the answer rests on: size against architecture, and the recommended config's decisions at matched cost
    basis = ("explained by size", "beyond size", "at matched cost", "no architecture effect can be told")
    assert any(phrase in " ".join(shown.stdout.split()) for phrase in basis)
    # The other reads in this process (a `nas` process costs seconds of imports): the same commands, the same code.
    wide = CliRunner().invoke(app, ["show", "e2e", "--wide", "--storage", url])
    assert wide.exit_code == 0 and "predicted from" in wide.stdout and "held-out err" in wide.stdout
    exported = CliRunner().invoke(app, ["export", "e2e", "--pareto", "--out", str(tmp_path / "best"), "--storage", url])
    index = json.loads((tmp_path / "best" / "index.json").read_text())
    assert exported.exit_code == 0 and index["rests_on"] and any(p in " ".join(index["rests_on"]) for p in basis)
    # how it measured, carried to the export: the narrowing it stored, and the bias its answer took out
    measured = index["measured_as"]
    assert (
        measured["narrowing"] == {"min_width": 8, "min_share": 0.5, "keep": "head_size"}
        and measured["rungs"] == e2e.rungs
    )
    assert measured["bias_prior"] == "measured" and "taken out" in measured["bias_taken_out"]
    assert index["rests_on"][0].startswith("bias: the top rung's error taken out")
    listed = CliRunner().invoke(app, ["list", "--storage", url])
    assert listed.exit_code == 0 and "e2e" in listed.stdout and "completed" in listed.stdout


def test_diverged_trials_are_stored_with_inf_and_told_to_optuna(sqlite_url, tmp_path):
    run(nas_args("nan", sqlite_url, trials=3, space="diverge_space.yaml"), tmp_path)
    with Store(sqlite_url) as store:
        rows = store.trials("nan")
        study = optuna_study(sqlite_url, store, "nan")
    assert [r.status for r in rows] == ["diverged"] * 3
    assert all(r.val_loss == math.inf and "non-finite" in r.failure_reason for r in rows)
    assert all(t.state == optuna.trial.TrialState.COMPLETE and t.values[0] == math.inf for t in study.trials)


def test_a_killed_trial_process_is_recorded_failed_and_retried(url, tmp_path, started):
    # Two trials at once (one killed, one not), each long enough to be killed well inside: no repeats.
    driver = started.popen(nas_args("kill1", url, trials=2, flops="2e9", rungs=2, eta=2, repeat_seeds=0), tmp_path)

    def running_trial_worker():
        rows = [r for r in trial_rows(url, "kill1") if r.status == "running"]
        if not rows:
            return None
        workers = [p for p in started.remember_descendants(driver.pid) if "ImplicitFunc" in " ".join(p.cmdline())]
        return workers[0] if workers else None

    victim = wait_for(running_trial_worker)
    assert_listening_on_loopback_only([driver.pid, *(p.pid for p in started.remember_descendants(driver.pid))])
    time.sleep(1.0)  # well inside the trial
    victim.send_signal(signal.SIGKILL)
    out, err = driver.communicate(timeout=600)
    assert driver.returncode == 0, err[-4000:]
    rows = trial_rows(url, "kill1")
    retried = [r for r in rows if r.previous_attempts]
    assert retried, "the killed trial left no failed attempt"
    failed_attempt = retried[0].previous_attempts[0]
    assert failed_attempt["status"] == "failed" and failed_attempt["failure_reason"]
    assert retried[0].attempt == 1 and retried[0].status == "completed"
    assert len({r.number for r in rows if r.status == "completed"}) == 2
    with Store(url) as store:  # rungs measured before the kill were kept; the retry added none twice
        rungs = [(g.number, g.rung, g.seed) for g in store.rungs("kill1")]
    assert len(rungs) == len(set(rungs)) and {n for n, _, _ in rungs} == {r.number for r in rows}


def test_driver_killed_then_resume_completes_without_loss_or_duplicates(url, tmp_path, started):
    # 4 trials, 2 at a time: the driver dies with 2 completed and the rest running or not started yet.
    driver = started.popen(nas_args("resume1", url, trials=4, flops="1e9", rungs=2, eta=2, repeat_seeds=0), tmp_path)
    wait_for(lambda: len([r for r in final_rows(url, "resume1") if r.status == "completed"]) >= 2)
    started.remember_descendants(driver.pid)
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=30)
    started.stop_all()  # the dead driver's Ray daemons (only the ones it started)
    before = {r.number: (r.val_loss, r.tokens_seen) for r in final_rows(url, "resume1") if r.status == "completed"}
    with Store(url) as store:
        assert store.get_search("resume1").status == "running"  # it never got to say otherwise
        rungs_before = {(g.number, g.rung, g.seed): g.val_loss for g in store.rungs("resume1")}
    assert len(before) < 4  # the resume has trials left to run

    run([sys.executable, "-m", "nas.cli", "resume", "resume1", "--storage", url, "--no-progress"], tmp_path)
    with Store(url) as store:
        rows = store.trials("resume1")
        assert store.get_search("resume1").status == "completed"
        study = optuna_study(url, store, "resume1")
        rungs_after = {(g.number, g.rung, g.seed): g.val_loss for g in store.rungs("resume1")}
    after = {r.number: (r.val_loss, r.tokens_seen) for r in rows if r.status == "completed"}
    assert all(after[n] == v for n, v in before.items())  # no completed result lost or rewritten
    assert rungs_before and all(rungs_after[k] == v for k, v in rungs_before.items())  # nor any rung
    assert len(rows) == len({r.number for r in rows})  # no duplicates
    assert len(after) >= 4
    interrupted = [r for r in rows if r.status == "interrupted"]
    assert all(r.failure_reason == "the search driver stopped before this trial finished" for r in interrupted)
    assert optuna.trial.TrialState.RUNNING not in {t.state for t in study.trials}  # stale trials were failed


def test_two_searches_write_one_store_at_once(url, tmp_path, started):
    """Two drivers open a fresh store together: both create the schemas (ours and Optuna's) under a lock."""
    small = {"trials": 2, "flops": "5e8", "rungs": 2, "eta": 2, "repeat_seeds": 0}  # the schemas are what is tested
    drivers = [
        started.popen(nas_args(name, url, ladder=ladder, **small), tmp_path)
        for name, ladder in (("left", "budget"), ("right", "replica"))
    ]
    for d in drivers:
        _, err = d.communicate(timeout=600)
        assert d.returncode == 0, err[-4000:]
    with Store(url) as store:
        for name in ("left", "right"):
            assert store.get_search(name).status == "completed"
            assert [r.status for r in store.trials(name)] == ["completed"] * 2
        # Each on its own ladder: the budget ladder's rungs are the trial's own model, the replicas narrower.
        assert {g.d_model for g in store.rungs("left")} == {None}
        assert all(
            g.d_model <= r.d_model for g in store.rungs("right") for r in store.trials("right") if r.number == g.number
        )


def test_configs_the_budget_cannot_pay_for_are_infeasible_not_run(sqlite_url, tmp_path):
    # one step of the smallest; 2 rungs and no repeats: what is checked is which proposals train at the lowest
    tight = nas_args("tight", sqlite_url, trials=3, flops="3e7", ladder="budget", rungs=2, eta=2, repeat_seeds=0)
    run(tight, tmp_path)
    with Store(sqlite_url) as store:
        rows = store.trials("tight")
        study = optuna_study(sqlite_url, store, "tight")
    infeasible = [r for r in rows if r.status == "infeasible"]
    assert infeasible and all(r.val_loss == math.inf and "one training step" in r.failure_reason for r in infeasible)
    # infeasible proposals do not count: the search proposed again until 3 trials trained (or ran out of proposals)
    trained = [r for r in rows if r.status != "infeasible"]
    assert len(trained) == 3 or len(rows) == 10 * 3
    assert all(not r.tokens_seen for r in infeasible)  # never trained
    flagged = {t.number for t in study.trials if t.system_attrs.get("constraints:infeasible", 0) > 0}
    assert flagged == {r.number for r in infeasible}
