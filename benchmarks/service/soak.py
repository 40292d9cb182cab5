"""Soak: 200 no-op trials through the search service on PostgreSQL while it is knocked about.

    python -m benchmarks.service.soak                  # about 5 min on 2 cores; writes results/soak.json
    python -m benchmarks.service.soak --trials 40      # a quick look

The search is the real service (`nas.search.launch.launch_search` / `resume_search`: Ray Tune, the Optuna
study, the store, both on a private PostgreSQL server started here, `tests/postgres_server.py`) run by
a driver process of its own, with a trainable that does no work but sleep `--trial-seconds` and
report (`benchmarks.service.service_overhead.noop`'s objective).  While it runs, this process causes, for real:

- worker kills: every 3-8 s (random, seeded), SIGKILL of one running trial's Ray worker process
  (`ray::ImplicitFunc`), which Tune retries (`--retries 3`);
- one server restart: once 30% of the trials are final, a fast shutdown, 3 s down, a start;
- one driver SIGTERM: once 60% are final; the driver stops gently (exit 143), and a new driver
  process runs `resume_search` to the end.

Measured from the store and the Optuna study at the end: trials final (completed or failed); lost
(requested but without a final row once the resumed driver is done: goal 0; a result a worker
reported that never reached the store would also show as an Optuna trial disagreeing with its row);
duplicated (rows beyond one per trial number: goal 0); Optuna trials left RUNNING or disagreeing
with their stored status (goal 0); retries (attempts beyond the first); kills; the store's retry
warnings in the drivers' logs; and the wall time.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.harness import machine_info, write_json

HERE = Path(__file__).resolve().parents[1]  # benchmarks/: its data/ and results/
OUT = HERE / "results" / "soak.json"
NAME = "soak"


def sleepy_noop(request, report=None, on_rung_done=None):
    """A worker that sleeps, then returns the no-op objective (a kill can land while it sleeps)."""
    from benchmarks.service.service_overhead import noop

    time.sleep(float(os.environ.get("RESNAS_SOAK_TRIAL_SECONDS", "1.0")))
    return noop(request)


def drive(url: str, trials: int, resume: bool) -> int:
    """The driver process: run (or resume) the soak search with the no-op worker; its exit code."""
    from nas.search.interrupt import SearchInterrupted, StoreOutage
    from nas.search.launch import launch_search, resume_search
    from nas.search.ray_env import configure_ray_env
    from nas.search.settings import SearchSettings
    from nas.space import load_space
    from nas.space.budget import Budget
    from nas.store import Store

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    configure_ray_env()
    store = Store(url)
    try:
        if resume:
            resume_search(store, NAME, show_progress=False, worker=sleepy_noop)
        else:
            budget = Budget(trial_flops=2e12, trials=trials, rungs=1, min_tokens_per_param=None)
            settings = SearchSettings(workers=2, retries=3, seed=0)
            launch_search(store, NAME, load_space(), budget, settings, show_progress=False, worker=sleepy_noop)
    except SearchInterrupted as stop:
        return stop.exit_code
    except StoreOutage as outage:
        return outage.exit_code
    return 0


def _final_count(url: str) -> int:
    from nas.store import Store, StoreError
    from workers.status import FINAL

    try:
        with Store(url, retry_seconds=0) as store:
            return len(store.trials(NAME, statuses=FINAL))
    except StoreError:
        return -1


def _kill_workers(driver: subprocess.Popen, stop: threading.Event, rng: random.Random, kills: list) -> None:
    """SIGKILL one running trial's Ray worker every 3-8 s until `stop` is set."""
    import psutil

    while not stop.wait(rng.uniform(3.0, 8.0)):
        try:
            workers = [
                p
                for p in psutil.Process(driver.pid).children(recursive=True)
                if "ImplicitFunc" in " ".join(p.cmdline())
            ]
        except psutil.Error:
            continue
        if workers:
            victim = rng.choice(workers)
            try:
                victim.send_signal(signal.SIGKILL)
                kills.append(time.monotonic())
            except psutil.Error:
                pass


def _start_driver(url: str, trials: int, resume: bool, log_path: Path, env: dict) -> subprocess.Popen:
    args = [sys.executable, "-m", "benchmarks.service.soak", "drive", url, "--trials", str(trials)]
    args += ["--resume"] if resume else []
    env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH")]))}
    return subprocess.Popen(args, stdout=log_path.open("w"), stderr=subprocess.STDOUT, env=env, cwd=log_path.parent)


def _phase(driver, url, trials, share, stop_event, rng, kills, timeout=1800) -> None:
    """Kill workers until `share` of the trials are final (or the driver exits)."""
    killer = threading.Thread(target=_kill_workers, args=(driver, stop_event, rng, kills), daemon=True)
    killer.start()
    deadline = time.monotonic() + timeout
    while driver.poll() is None and _final_count(url) < share * trials and time.monotonic() < deadline:
        time.sleep(0.5)
    stop_event.set()
    killer.join()


def soak(trials: int, trial_seconds: float, seed: int, log_dir: Path | None = None) -> dict:
    import optuna

    from nas.search.study import optuna_storage
    from nas.store import Store
    from tests import postgres_server as pg  # the tests' private-server helper, as store_load uses it
    from workers.status import FINAL

    rng = random.Random(seed)
    kills: list[float] = []
    with tempfile.TemporaryDirectory(prefix="resnas-soak-") as tmp_name:
        tmp = Path(tmp_name)
        server = pg.LocalPostgres.temporary()  # its own folder, which the server's account can reach
        url = pg.create_database(server.start())
        env = {**os.environ, "RESNAS_SOAK_TRIAL_SECONDS": str(trial_seconds), "RESNAS_SPOOL": str(tmp / "spool")}
        try:
            start = time.monotonic()
            driver = _start_driver(url, trials, False, tmp / "driver1.log", env)
            _phase(driver, url, trials, 0.3, threading.Event(), rng, kills)
            restarted_at = _final_count(url)
            server.restart(down_seconds=3.0)
            _phase(driver, url, trials, 0.6, threading.Event(), rng, kills)
            sigterm_at = _final_count(url)
            driver.send_signal(signal.SIGTERM)
            first_exit = driver.wait(timeout=600)
            driver = _start_driver(url, trials, True, tmp / "driver2.log", env)
            _phase(driver, url, trials, 1.01, threading.Event(), rng, kills)
            second_exit = driver.wait(timeout=1800)
            wall = time.monotonic() - start
            logs = (tmp / "driver1.log").read_text() + (tmp / "driver2.log").read_text()
            if log_dir is not None:
                log_dir.mkdir(parents=True, exist_ok=True)
                for name in ("driver1.log", "driver2.log"):
                    (log_dir / name).write_text((tmp / name).read_text())
            with Store(url) as store:
                rows = store.trials(NAME)
                search_status = str(store.get_search(NAME).status)
                study = optuna.load_study(
                    study_name=store.get_search(NAME).optuna_study_name, storage=optuna_storage(url)
                )
                states = {t.number: t.state.name for t in study.trials}
        finally:
            server.stop()
    final = [r for r in rows if r.status in FINAL]
    numbers = {r.number for r in final}
    disagree = [
        r.number
        for r in rows
        if states.get(r.optuna_trial_number) != ("FAIL" if r.status in ("failed", "interrupted") else "COMPLETE")
    ]
    return dict(
        machine=machine_info(),
        requested=trials,
        trial_seconds=trial_seconds,
        seed=seed,
        faults=dict(
            worker_kills=len(kills),
            server_restart_at_final=restarted_at,
            driver_sigterm_at_final=sigterm_at,
            first_driver_exit=first_exit,
            resumed_driver_exit=second_exit,
        ),
        search_status=search_status,
        rows=len(rows),
        statuses={str(status): sum(r.status == status for r in rows) for status in sorted({r.status for r in rows})},
        completed=sum(r.status == "completed" for r in rows),
        failed=sum(r.status == "failed" for r in rows),
        interrupted_rows=sum(r.status == "interrupted" for r in rows),
        final=len(numbers),
        lost=max(0, trials - len(numbers)),
        duplicated=len(rows) - len({r.number for r in rows}),
        retries=sum(r.attempt for r in rows),
        optuna_running_left=sum(s == "RUNNING" for s in states.values()),
        optuna_disagreements=len(disagree),
        store_retry_warnings=logs.count("unreachable for"),
        spooled_writes=logs.count("kept in"),
        driver_errors=[line for line in logs.splitlines() if line.startswith(("ERROR nas", "error:"))][-20:],
        wall_s=wall,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    d = sub.add_parser("drive", help="(internal) the driver process")
    d.add_argument("url")
    d.add_argument("--trials", type=int, required=True)
    d.add_argument("--resume", action="store_true")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--trial-seconds", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--log-dir", type=Path, default=None, help="keep the drivers' logs here")
    args = parser.parse_args()
    if args.command == "drive":
        sys.exit(drive(args.url, args.trials, args.resume))
    result = soak(args.trials, args.trial_seconds, args.seed, args.log_dir)
    write_json(args.out, result)
    print({k: v for k, v in result.items() if k != "machine"})


if __name__ == "__main__":
    main()
