"""One `TrialRequest`, carried out: the trial the search asked for, measured as it said, its rungs told to its gate.

`run_request(request, report)` never raises (as `run_trial`): a crash comes back as a `TrialOutcome` whose
result has the status and a one-line reason. It loads the corpus, then trains

- replica rungs (`LadderPlan.replica_flops`): each rung its own run of a narrower copy of the architecture on
  the target's path (`workers.trial.replica.run_replica_trial`), a rung the gate asks for measured again with a
  second seed;
- or the architecture itself on its budget ladder (or at its single budget: `workers.trial.run.run_trial`).

After every rung the gate (`TrialRequest.rung_gate`) is told the rung and says whether the trial climbs on;
its last prediction is the loss the outcome tells (`TrialOutcome.told`). Without a gate, or on a single
budget, the measured loss is told.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..data.corpus import load_corpus
from ..status import TrialStatus
from ..training.records import RungRecord
from ..training.train import Report
from .contract import RungVerdict, TrialOutcome, TrialRequest, TrialTicket, Verdict
from .replica import run_replica_trial
from .result import TrialResult
from .run import run_trial

__all__ = ["not_trained", "run_request"]

OnRungDone = Callable[[int], None]  # told a rung's index once its verdict is to climb on
OnRung = Callable[[RungRecord], Verdict]  # told each rung's record: the gate's verdict


def run_request(
    request: TrialRequest, report: Report | None = None, on_rung_done: OnRungDone | None = None
) -> TrialOutcome:
    """Carry out `request` (module docstring); `report` is told training progress, `on_rung_done` each rung the
    trial climbs past (a point where a driver may stop it)."""
    last: list[RungVerdict] = []
    gate = request.rung_gate

    def on_rung(rung: RungRecord) -> Verdict:
        assert gate is not None
        verdict = gate(request.ticket.number, request.ticket.costs.executed_flops_per_token, rung)
        last[:] = [verdict]
        if verdict.verdict == Verdict.CLIMB and on_rung_done is not None:
            on_rung_done(rung.rung)
        return verdict.verdict

    result = _train(request, report, on_rung if gate is not None else None)
    rungs_told = gate is not None and request.ladder_plan.reports_rungs
    predicted = last[0].predicted_loss if rungs_told and last else None
    return TrialOutcome(request.ticket.number, result, TrialOutcome.told(result, predicted))


def _train(request: TrialRequest, report: Report | None, on_rung: OnRung | None) -> TrialResult:
    """Replica rungs, or the config itself on its ladder or at its budget (one run: no rung measured again)."""
    m, corpus = request.ladder_plan, load_corpus(request.data)
    if m.is_replica:
        return run_replica_trial(request, corpus, report, on_rung)
    climbs = None if on_rung is None else lambda rung: on_rung(rung) == Verdict.CLIMB
    return run_trial(
        request.arch,
        m.top_flops,
        corpus,
        request.seed,
        report,
        optim=request.optim,
        run=request.run,
        width_probe=request.width_probe,
        spacing=m.spacing,
        on_rung=climbs,
    )


def not_trained(ticket: TrialTicket, status: TrialStatus, reason: str) -> TrialOutcome:
    """The outcome of a config that is not trained (infeasible, or stopped before it started): its status and
    reason, no loss, nothing spent."""
    result = TrialResult.untrained(status, reason, ticket.costs.executed_flops_per_token, time.perf_counter())
    return TrialOutcome(ticket.number, result, TrialOutcome.told(result, None))
