"""What the search service itself costs: a 16-trial search of a worker that does no work.

One run measures, side by side:
- the service on its default local setup: a local Ray started by the run (`nas.search.ray_env.init_ray`,
  timed on its own), Ray Tune + OptunaSearch with the TPE sampler (multivariate, seed 0), 2 workers,
  the shipped default space, `Budget(trial_flops=2e12, trials=16)`, and the resnas SQLite store
  with the Optuna study in the same file. The worker (`noop`) trains nothing and returns a result;
- Optuna's ask/tell called directly in one process for 16 trials of the same no-op objective,
  the same define-by-run sampling (`nas.search.study.DefineByRun`: same knobs, same constraint) and
  the same sampler settings, with (a) in-memory storage and (b) RDB storage on a SQLite file
  (`nas.search.study.optuna_storage`), which separates Optuna's storage cost from Ray/Tune's;
- the store's write latency: `Store.start_trial` and `Store.finish_trial` over 50 trials (median,
  p99), for the record a no-op trial writes and for one with a 40-point curve and diagnostics.

Per-trial overhead = (search wall time - Ray start-up) / 16 for the service (search wall time
includes start-up), wall time / 16 for the direct loops: with 2 workers and no work it is the
service's throughput cost per trial, not one trial's latency. The store's driver-side started/
finished times split it further: when the first trial starts after `run_tuner` is called (Tune
and OptunaSearch set-up), one trial's latency (the slowest is the first: a worker process is
spawned and unpickles the trainable's context), and the steady-state interval between finishes.
The direct loops run before Ray starts, so no Ray process competes; their timer starts after
the RDB storage object (and its schema) exists, the service's before.

    python -m benchmarks.service.service_overhead --out benchmarks/results/service_overhead.json
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import tempfile
import time
import warnings
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import optuna

from benchmarks.harness import machine_info, quantiles_ms, write_json
from nas.search.launch import create_search
from nas.search.ray_env import configure_ray_env, init_ray
from nas.search.settings import SearchSettings
from nas.search.study import DefineByRun, make_sampler, optuna_storage
from nas.space import load_space
from nas.space.budget import Budget
from nas.store import Store
from workers.trial.contract import TICKET_KEY

log = logging.getLogger("service_overhead")
N_TRIALS = 16
TRIAL_FLOPS = 2e12


def noop_values(params: dict, executed_flops_per_token: float = 1.0) -> tuple[float, float]:
    """The no-op objective: a deterministic loss from the LR, and the config's executed FLOPs/token."""
    v = 2.0 + (math.log10(params["lr"]) + 2.5) ** 2
    f = executed_flops_per_token
    return v, (f if math.isfinite(f) else 1.0)


def noop(request, report=None, on_rung_done=None):
    """A worker (`nas.search.trainable.Worker`) that trains nothing: a completed outcome with the no-op loss."""
    from workers.trial.contract import TrialOutcome
    from workers.trial.result import TrialResult

    v, f = noop_values({"lr": request.optim.lr}, request.ticket.costs.executed_flops_per_token)
    return TrialOutcome(request.ticket.number, TrialResult.loss_only(v, f), v)


def direct_ask_tell(space, budget: Budget, storage, seed: int = 0) -> dict:
    """16 trials of the no-op objective through Optuna's ask/tell in this process."""
    define = DefineByRun(space, budget)
    start = time.perf_counter()
    study = optuna.create_study(
        directions=["minimize", "minimize"],
        sampler=make_sampler("tpe", seed),
        storage=storage,
        study_name=f"direct-{seed}",
    )
    created = time.perf_counter() - start
    for _ in range(N_TRIALS):
        trial = study.ask()
        extra = define(trial)
        study.tell(trial, list(noop_values(trial.params, extra[TICKET_KEY].costs.executed_flops_per_token)))
    wall = time.perf_counter() - start
    done = len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
    return {
        "wall_s": wall,
        "per_trial_s": wall / N_TRIALS,
        "create_study_s": created,
        "per_trial_excluding_create_s": (wall - created) / N_TRIALS,
        "completed_trials": done,
    }


def run_service(tmp: Path, space, budget: Budget, settings: SearchSettings) -> dict:
    """Ray start-up, then the 16-trial search through `run_tuner`, on a SQLite store in `tmp`."""
    t0 = time.perf_counter()
    configure_ray_env()  # before Ray is imported
    from nas.search import tune_runner

    import_s = time.perf_counter() - t0
    store = Store(f"sqlite:///{tmp / 'resnas.db'}")
    name = "overhead"
    study = create_search(store, name, space, budget, settings)
    t1 = time.perf_counter()
    init_ray(settings)
    startup = time.perf_counter() - t1
    tuner_started = datetime.now(timezone.utc)
    tune_runner.run_tuner(store, name, space, budget, settings, study, N_TRIALS, show_progress=False, worker=noop)
    wall, tuner_ended = time.perf_counter() - t1, datetime.now(timezone.utc)
    rows = store.trials(name)
    ot = optuna.load_study(study_name=study, storage=optuna_storage(store.url))
    out = {
        "ray_import_s": import_s,
        "ray_startup_s": startup,
        "search_wall_s": wall,
        "per_trial_s": (wall - startup) / N_TRIALS,
        **trial_timing(rows, tuner_started, tuner_ended),
        "stored_trials": len(rows),
        "stored_completed": store.count_trials(name, ["completed"]),
        "optuna_completed": len(ot.get_trials(states=(optuna.trial.TrialState.COMPLETE,))),
    }
    store.close()
    return out


def trial_timing(rows: list, tuner_started: datetime, tuner_ended: datetime) -> dict:
    """From the store's driver-side times: the first trial's start, one trial's latency, the steady state."""
    done = sorted((r for r in rows if r.finished_at), key=lambda r: r.finished_at)
    if len(done) < 2:
        return {}
    latency = [(r.finished_at - r.started_at).total_seconds() for r in done]
    first_start = min(r.started_at for r in rows)
    return {
        "first_trial_started_after_s": (first_start - tuner_started).total_seconds(),
        "trial_latency_s": {"median": statistics.median(latency), "max": max(latency)},
        "steady_state_per_trial_s": (done[-1].finished_at - done[0].finished_at).total_seconds() / (len(done) - 1),
        "tuner_return_after_last_finish_s": (tuner_ended - done[-1].finished_at).total_seconds(),
    }


def fake_result(rich: bool, i: int):
    """The record a no-op trial writes, or one with a 40-point curve and diagnostics like a real trial's."""
    from workers.training.records import CurvePoint
    from workers.trial.result import TrialResult

    result = TrialResult.loss_only(2.0 + i / 100, 1e6)
    if rich:
        result.curve = [CurvePoint(s, 2048 * s, 3.0, 6e6 * s, 1e-3, 400, 3.1, s // 10, 40) for s in range(0, 400, 10)]
        result.diagnostics = {"residual_rms": [1.0] * 8, "skip_rate": [0.25] * 8}
    return result


def write_latency(tmp: Path, space, budget: Budget, n: int = 50) -> dict:
    """Median and p99 of Store.start_trial / finish_trial over `n` trials per record kind."""
    store = Store(f"sqlite:///{tmp / 'writes.db'}")
    out = {}
    for kind in ("minimal", "with_curve"):
        store.create_search(
            kind,
            requested_trials=n,
            budget=budget.model_dump(),
            space=space.model_dump(),
            settings={},
            optuna_study_name=None,
            code_version=None,
        )
        starts, finishes = [], []
        for i in range(n):
            t0 = time.perf_counter()
            tid = store.start_trial(kind, number=i, config={"residual": "nag", "n_layers": 4, "lr": 1e-3})
            t1 = time.perf_counter()
            store.finish_trial(tid, fake_result(kind == "with_curve", i))
            t2 = time.perf_counter()
            starts.append(t1 - t0)
            finishes.append(t2 - t1)
        out[kind] = {"start_trial_ms": quantiles_ms(starts), "finish_trial_ms": quantiles_ms(finishes)}
    store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/service_overhead.json"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    space, budget, settings = (
        load_space(),
        Budget(trial_flops=TRIAL_FLOPS, trials=N_TRIALS, min_tokens_per_param=None),
        SearchSettings(workers=2),
    )
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="resnas-overhead-") as tmp:
        tmp = Path(tmp)
        direct = {"in_memory": direct_ask_tell(space, budget, None)}
        log.info("direct ask/tell, in-memory: %s", direct["in_memory"])
        direct["sqlite_rdb"] = direct_ask_tell(space, budget, optuna_storage(f"sqlite:///{tmp / 'optuna.db'}"))
        log.info("direct ask/tell, SQLite RDB: %s", direct["sqlite_rdb"])
        writes = write_latency(tmp, space, budget)
        log.info("store writes: %s", writes)
        service = run_service(tmp, space, budget, settings)
        log.info("service: %s", service)
        import ray

        ray.shutdown()
    out = summarise(service, direct, writes)
    out.update(
        machine=machine_info(),
        load_average_before=load_before,
        load_average_after=os.getloadavg(),
        setup={
            "trials": N_TRIALS,
            "trial_flops": TRIAL_FLOPS,
            "settings": asdict(settings),
            "space": "nas.space.load_space() (shipped default)",
            "store": "SQLite file in a temp dir",
        },
    )
    write_json(args.out, out)
    log.info("summary: %s", json.dumps(out["summary"]))


def summarise(service: dict, direct: dict, writes: dict) -> dict:
    per = service["per_trial_s"]
    summary = {
        "ray_startup_s": service["ray_startup_s"],
        "service_per_trial_s": per,
        "direct_in_memory_per_trial_s": direct["in_memory"]["per_trial_s"],
        "direct_sqlite_per_trial_s": direct["sqlite_rdb"]["per_trial_s"],
        "service_vs_direct_in_memory": per / direct["in_memory"]["per_trial_s"],
        "service_vs_direct_sqlite": per / direct["sqlite_rdb"]["per_trial_s"],
        "sqlite_storage_cost_per_trial_s": direct["sqlite_rdb"]["per_trial_s"] - direct["in_memory"]["per_trial_s"],
        "ray_tune_cost_per_trial_s": per - direct["sqlite_rdb"]["per_trial_s"],
        "service_steady_state_per_trial_s": service.get("steady_state_per_trial_s"),
        "first_trial_started_after_s": service.get("first_trial_started_after_s"),
        "all_16_trials_stored": service["stored_trials"] == N_TRIALS == service["stored_completed"],
    }
    return {"summary": summary, "service": service, "direct_ask_tell": direct, "store_writes": writes}


if __name__ == "__main__":
    main()
