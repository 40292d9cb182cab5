"""Load on a PostgreSQL store: 500 no-op trials, 8 at a time, through the real search service.

The search is `nas.search.tune_runner.run_tuner` as `nas search` runs it (a local Ray started with 8
logical CPUs, Ray Tune + OptunaSearch, the sampler of `--sampler`, the shipped default space,
retries 1) with the no-op worker of `benchmarks.service.service_overhead`, on a fresh database of a PostgreSQL
server: `--admin-url` of a running one, else a private server started as the tests start theirs
(`tests/postgres_server.py`, durable: fsync and synchronous commit on). The resnas tables and the
Optuna study share that database, as in production.

Measured:
- store write latency: every `Store.start_trial` / `Store.finish_trial` the driver's
  `StoreCallback` makes, timed around the call (the store has no timing hook), median and p99;
- trials per second: trials / wall time of `run_tuner`, Ray's start-up excluded (timed apart);
- no trial lost or duplicated: store rows == trials, distinct trial numbers == trials, all
  completed at their first attempt; Optuna's study holds exactly `trials` trials, all COMPLETE,
  whose numbers are the store's `optuna_trial_number`s.

    python -m benchmarks.service.store_load --out benchmarks/results/store_load.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
import warnings
from dataclasses import asdict
from pathlib import Path

import optuna

from benchmarks.harness import machine_info, quantiles_ms, write_json
from benchmarks.service.service_overhead import TRIAL_FLOPS, noop
from nas.search.launch import create_search
from nas.search.ray_env import configure_ray_env, init_ray
from nas.search.settings import SearchSettings
from nas.search.study import optuna_storage
from nas.space import load_space
from nas.space.budget import Budget
from nas.store import Store
from tests.postgres_server import LocalPostgres, create_database, drop_database, hide_password

log = logging.getLogger("store_load")


class TimedStore(Store):
    """A `Store` that times each trial write the search makes (seconds, per method)."""

    def __init__(self, url: str):
        super().__init__(url)
        self.write_s: dict[str, list[float]] = {"start_trial": [], "finish_trial": []}

    def start_trial(self, *args, **kwargs) -> int:
        t0 = time.perf_counter()
        try:
            return super().start_trial(*args, **kwargs)
        finally:
            self.write_s["start_trial"].append(time.perf_counter() - t0)

    def finish_trial(self, *args, **kwargs) -> None:
        t0 = time.perf_counter()
        try:
            super().finish_trial(*args, **kwargs)
        finally:
            self.write_s["finish_trial"].append(time.perf_counter() - t0)


def run_search(url: str, n_trials: int, settings: SearchSettings) -> dict:
    """The search through `run_tuner` on `url`, then what the store and Optuna hold."""
    configure_ray_env()  # before Ray is imported
    from nas.search import tune_runner

    space, budget = load_space(), Budget(trial_flops=TRIAL_FLOPS, trials=n_trials, min_tokens_per_param=None)
    store, name = TimedStore(url), "load"
    study = create_search(store, name, space, budget, settings)
    t0 = time.perf_counter()
    init_ray(settings)
    startup = time.perf_counter() - t0
    t1 = time.perf_counter()
    tune_runner.run_tuner(store, name, space, budget, settings, study, n_trials, show_progress=False, worker=noop)
    wall = time.perf_counter() - t1
    out = {
        "ray_startup_s": startup,
        "search_wall_s": wall,
        "trials_per_s": n_trials / wall,
        "writes": {kind: quantiles_ms(xs) for kind, xs in store.write_s.items()},
        "all_writes": quantiles_ms([x for xs in store.write_s.values() for x in xs]),
        "integrity": integrity(store, name, study, n_trials),
    }
    store.close()
    return out


def integrity(store: Store, name: str, study_name: str, n_trials: int) -> dict:
    """Exact counts from the store and from Optuna's study: nothing lost, nothing counted twice."""
    rows = store.trials(name)
    storage = optuna_storage(store.url)
    trials = optuna.load_study(study_name=study_name, storage=storage).get_trials(deepcopy=False)
    storage.engine.dispose()
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    counts = {
        "store_rows": len(rows),
        "distinct_trial_numbers": len({r.number for r in rows}),
        "store_completed": sum(r.status == "completed" for r in rows),
        "store_retried": sum(r.attempt > 0 for r in rows),
        "optuna_trials": len(trials),
        "optuna_complete": len(complete),
    }
    same_numbers = {r.optuna_trial_number for r in rows} == {t.number for t in trials}
    counts["optuna_numbers_match_store"] = same_numbers
    counts["no_trial_lost_or_duplicated"] = same_numbers and all(
        counts[k] == n_trials
        for k in ("store_rows", "distinct_trial_numbers", "store_completed", "optuna_trials", "optuna_complete")
    )
    return counts


def server_settings(url: str) -> dict:
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as db:
        out = {
            key: db.execute(text(f"SHOW {key}")).scalar()
            for key in ("server_version", "fsync", "synchronous_commit", "max_connections")
        }
    engine.dispose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/store_load.json"))
    parser.add_argument("--admin-url", help="admin URL of a running PostgreSQL server (default: start a private one)")
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--sampler", default="tpe", help="tpe (the service's default), nsga2, random, gp")
    args = parser.parse_args()
    if args.trials < 1 or args.concurrency < 1:
        parser.error("--trials and --concurrency must be >= 1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="resnas-load-") as tmp:
        server = None if args.admin_url else LocalPostgres.temporary(durable=True)
        admin_url = args.admin_url or server.start()
        url = create_database(admin_url, prefix="resnas_load")
        try:
            settings = SearchSettings(workers=args.concurrency, sampler=args.sampler, ray_dir=str(Path(tmp) / "ray"))
            result = run_search(url, args.trials, settings)
            postgres = {
                **server_settings(url),
                "server": "private, started by this run" if server else hide_password(admin_url),
            }
            import ray

            ray.shutdown()
        finally:
            drop_database(admin_url, url)
            if server is not None:
                server.stop()
    out = {
        "summary": {
            "trials": args.trials,
            "concurrent_trials": args.concurrency,
            "store_write_ms_median": result["all_writes"]["median"],
            "store_write_ms_p99": result["all_writes"]["p99"],
            "trials_per_s": result["trials_per_s"],
            "no_trial_lost_or_duplicated": result["integrity"]["no_trial_lost_or_duplicated"],
        },
        **result,
        "postgres": postgres,
        "machine": {**machine_info(), "logical_cpus": os.cpu_count()},
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "setup": {
            "settings": {**asdict(settings), "ray_dir": "<a temporary folder>"},
            "trial_flops": TRIAL_FLOPS,
            "worker": "service_overhead.noop",
            "store_writer": "the search driver's StoreCallback (one process; Optuna's storage beside it)",
            "space": "nas.space.load_space() (shipped default)",
            "ray_num_cpus": args.concurrency,
        },
    }
    write_json(args.out, out)
    log.info("summary: %s", json.dumps(out["summary"]))
    if not out["summary"]["no_trial_lost_or_duplicated"]:
        log.error("trials lost or duplicated: %s", result["integrity"])
        sys.exit(1)


if __name__ == "__main__":
    main()
