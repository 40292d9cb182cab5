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

from .data import DataConfig, load_corpus
from .status import TrialStatus
from .trial import run_trial

OBJECTIVES = ("val_loss", "executed_flops_per_token")  # both minimised


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
    """Ray Tune function trainable. `context`: budget_flops, seed, data (DataConfig dict), and
    `configs`: a callable turning params into (ArchConfig, OptimConfig, RunConfig) or raising."""
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
        tune.report({"val_loss": math.inf, "executed_flops_per_token": math.inf, "progress": point})

    result = run_trial(
        arch, context["budget_flops"], corpus, seed=context["seed"], report=progress, optim=optim, run=run
    )
    tune.report(_final(result.to_dict()))


def _final(record: dict) -> dict:
    """The last report: objectives (never NaN) plus the whole record under `trial_result`."""
    out: dict[str, Any] = {key: finite_or_inf(record.get(key)) for key in OBJECTIVES}
    out["trial_result"] = record
    out["status"] = record.get("status")
    return out
