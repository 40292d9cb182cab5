"""The Ray Tune side of one trial: the function Tune runs, and the planner that turns its config into a request.

Tune hands each trial its config (the space's knobs and the search's `TrialTicket`,
`workers.trial.contract`, which carries the typed configs those knobs map to). In the trial's process
`tune_trial` asks the `TrialPlanner` (bound once per search with `tune.with_parameters`) for the
`TrialRequest` of that ticket, and hands it to the worker (`workers.trial.execute.run_request`, or a stand-in
a benchmark gives). An infeasible ticket is not trained.

What goes back to the driver are Tune reports, each carrying every objective a search may minimise
(`OBJECTIVES`; the searcher reads the search's own, `metric_keys`): progress ones carry +inf objectives and the
curve's `CurvePoint` under `PROGRESS_KEY` (`progress_of`; a trial cut short, by a time limit or a killed driver,
can never put a partial loss on the front), a rung
the trial climbs past is reported under `RUNG_DONE` (a point where the driver may stop it), and the last
report carries the objectives (never NaN: Optuna's `tell` rejects NaN and would leave the trial RUNNING) and the
`TrialOutcome` under `OUTCOME_KEY` (`final_report`, `outcome_of`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from workers.data.config import DataConfig
from workers.ladder.trial_plan import LadderPlan
from workers.status import TrialStatus
from workers.training.records import CurvePoint
from workers.training.train import Report
from workers.trial.contract import RungGate, TrialOutcome, TrialRequest, TrialTicket, split_config
from workers.trial.execute import OnRungDone, not_trained, run_request

from ..space.objectives import REPORT_KEYS, Objective, inference_cost

__all__ = [
    "OBJECTIVES",
    "OUTCOME_KEY",
    "PROGRESS_KEY",
    "RUNG_DONE",
    "TrialPlanner",
    "Worker",
    "final_report",
    "finite_or_inf",
    "metric_keys",
    "outcome_of",
    "progress_of",
    "tune_trial",
]

# All minimised: the loss predicted at the search's target budget (the measured loss when the search has no
# rungs), the executed forward FLOPs per token and the KV-cache bytes per token at seq_len
# (`nas.space.objectives`); a search reads two or all three (`metric_keys`).
OBJECTIVES = tuple(REPORT_KEYS.values())
RUNG_DONE = "rung_done"  # reported (with the rung's index) once a rung is stored and the trial climbs on
OUTCOME_KEY = "outcome"  # the last report's TrialOutcome
PROGRESS_KEY = "progress"  # a progress report's CurvePoint
Worker = Callable[[TrialRequest, Report | None, OnRungDone | None], TrialOutcome]


@dataclass(frozen=True)
class TrialPlanner:
    """What every trial of a search shares: the corpus, the seed, how trials are measured and the rung gate
    (None without rungs). Picklable: Ray ships it to each trial's process."""

    data: DataConfig
    seed: int
    measurement: LadderPlan
    rung_gate: RungGate | None = None

    def request(self, ticket: TrialTicket, width_probe: bool = True) -> TrialRequest:
        """The request for one sampled config: the ticket's typed configs (ValueError for a ticket without them,
        whose knobs make no valid config: it is infeasible, never trained)."""
        if ticket.configs is None:
            raise ValueError(f"trial {ticket.number} has no valid config: {ticket.infeasible_reason}")
        c = ticket.configs
        return TrialRequest(
            ticket, c.arch, c.optim, c.run, self.data, self.seed, self.measurement, self.rung_gate, width_probe
        )


def tune_trial(config: dict, planner: TrialPlanner, worker: Worker = run_request) -> None:
    """Ray Tune's function trainable: one trial, reported back to the driver (module docstring)."""
    import torch
    from ray import tune

    torch.set_num_threads(_threads_for_this_trial())
    _, ticket = split_config(config)
    if ticket.infeasible_reason:
        outcome = not_trained(ticket, TrialStatus.INFEASIBLE, ticket.infeasible_reason)
    else:

        def progress(point: CurvePoint) -> None:
            tune.report({**dict.fromkeys(OBJECTIVES, math.inf), PROGRESS_KEY: point})

        def climbed(rung: int) -> None:
            tune.report({**dict.fromkeys(OBJECTIVES, math.inf), RUNG_DONE: rung})

        outcome = worker(planner.request(ticket), progress, climbed)
    tune.report(final_report(outcome))


def metric_keys(objectives: tuple[Objective, ...]) -> list[str]:
    """The report keys of a search's objectives, in order: the Optuna study's values."""
    return [REPORT_KEYS[o] for o in objectives]


def final_report(outcome: TrialOutcome) -> dict:
    """The last report: the objectives (never NaN), the status and the outcome."""
    cost = inference_cost(outcome.result.arch)
    kv = None if cost is None else cost.kv_bytes_per_token
    values = (outcome.told_loss, outcome.result.executed_flops_per_token, kv)
    return {
        **{key: finite_or_inf(v) for key, v in zip(OBJECTIVES, values, strict=True)},
        "status": str(outcome.status),
        OUTCOME_KEY: outcome,
    }


def outcome_of(result: Mapping[str, Any] | None) -> TrialOutcome | None:
    """The outcome a trial's last report carries; None for a progress report (or none)."""
    outcome = (result or {}).get(OUTCOME_KEY)
    return outcome if isinstance(outcome, TrialOutcome) else None


def progress_of(result: Mapping[str, Any] | None) -> CurvePoint | None:
    """The curve point a progress report carries; None for any other report (or none)."""
    point = (result or {}).get(PROGRESS_KEY)
    return point if isinstance(point, CurvePoint) else None


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
