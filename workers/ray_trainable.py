"""The Ray Tune trainable: one proxy trial per call, results reported back to the driver.

The driver (nas.tune_runner) binds the trial-independent context with `tune.with_parameters` and the
searcher supplies the sampled params. Intermediate reports carry progress only: their objective
keys are +inf, so a trial cut short (time limit, killed driver) can never put a partial loss on
the Pareto front. The final report carries the whole `TrialResult` record. Never NaN: Optuna's
`tell` rejects NaN and would leave the trial RUNNING forever.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from .data import load_corpus
from .data_config import DataConfig
from .plans import LadderConfig
from .replica import DEFAULT_MIN_WIDTH, MEASURE_AGAIN, run_replica_trial
from .status import TrialStatus
from .trial import run_trial

# Both minimised: the loss predicted at the search's target budget (the last rung's loss when the
# search gives no rung decider), and the executed forward FLOPs per token.
OBJECTIVES = ("target_loss", "executed_flops_per_token")
RUNG_DONE = "rung_done"  # reported (with the rung's index) once a rung is stored and the trial climbs on


def finite_or_inf(value: Any) -> float:
    """A float safe for Optuna: NaN and None become +inf."""
    if value is None:
        return math.inf
    value = float(value)
    return math.inf if math.isnan(value) else value


def _threads_for_this_trial() -> int:
    """Match torch's intra-op threads to the CPUs Ray granted (oversubscription slows CPU torch 100x)."""
    try:
        import ray

        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1.0)
    except Exception:  # not under Ray
        cpus = os.cpu_count() or 1
    return max(1, int(cpus))


def proxy_trainable(params: dict, context: dict) -> None:
    """Ray Tune function trainable. `context`: budget_flops (the top rung's), seed, data (DataConfig
    dict), `configs`: a callable turning params into (ArchConfig, OptimConfig, RunConfig) or raising,
    `ladder` (LadderConfig fields, or None for a single budget) and `decide_rung`: a callable
    (number, seed, executed FLOPs per token, rung result) -> decision with `.promote` and
    `.predicted_loss` and `.measure_again`, which stores the rung and says whether the trial climbs on, or
    measures the rung again with another seed (replica rungs only; nas.answer).
    With `replica_rungs` (the rung budgets C_r, lowest first) and `target_flops`, each rung trains a
    replica of the sampled architecture on the target's path (`workers.replica`), all in this process."""
    from ray import tune

    torch.set_num_threads(_threads_for_this_trial())
    reason = params.get("infeasible_reason")
    if reason:
        tune.report(
            _final(
                {
                    "status": TrialStatus.INFEASIBLE,
                    "failure_reason": reason,
                    "val_loss": math.inf,
                    "executed_flops_per_token": params.get("executed_flops_per_token", math.inf),
                }
            )
        )
        return
    arch, optim, run = context["configs"](params)
    corpus = load_corpus(DataConfig(**context["data"]))

    def progress(point: dict) -> None:
        tune.report({**dict.fromkeys(OBJECTIVES, math.inf), "progress": point})

    decide, predicted = context.get("decide_rung"), {"loss": math.inf}

    def on_rung(rung: dict) -> bool | str:
        assert decide is not None
        seed = int(rung.get("seed", context["seed"]))
        decision = decide(params["optuna_number"], seed, params["executed_flops_per_token"], rung)
        predicted["loss"] = decision.predicted_loss
        if decision.measure_again:
            return MEASURE_AGAIN
        if decision.promote:  # the rung is stored and the trial goes on: a point where a driver may stop it
            tune.report({**dict.fromkeys(OBJECTIVES, math.inf), RUNG_DONE: int(rung["rung"])})
        return decision.promote

    ladder = context.get("ladder")
    result = _run(arch, optim, run, corpus, context, progress, on_rung if decide else None)
    record = result.to_dict()
    if record["status"] != TrialStatus.COMPLETED:  # only a completed trial has a loss to tell Optuna
        record["target_loss"] = math.inf
    else:
        record["target_loss"] = predicted["loss"] if decide and ladder else record["val_loss"]
    tune.report(_final(record))


def _run(arch, optim, run, corpus, context: dict, report, on_rung):
    """The trial itself: replica rungs (each its own run) when the context has them, else one run
    of the sampled config on its budget ladder (or at a single budget)."""
    if context.get("replica_rungs"):
        return run_replica_trial(
            arch,
            context["target_flops"],
            context["replica_rungs"],
            corpus,
            seed=context["seed"],
            report=report,
            optim=optim,
            run=run,
            on_rung=on_rung,
            min_width=context.get("replica_min_width", DEFAULT_MIN_WIDTH),
        )
    ladder = context.get("ladder")
    return run_trial(
        arch,
        context["budget_flops"],
        corpus,
        seed=context["seed"],
        report=report,
        optim=optim,
        run=run,
        ladder=LadderConfig(**ladder) if ladder else None,
        on_rung=on_rung,
    )


def _final(record: dict) -> dict:
    """The last report: objectives (never NaN) plus the whole record under `trial_result`."""
    out: dict[str, Any] = {key: finite_or_inf(record.get(key)) for key in OBJECTIVES}
    out["trial_result"] = record
    out["status"] = record.get("status")
    return out
