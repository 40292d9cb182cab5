"""The one vocabulary of trial statuses: the trial result, the store's schema, the search and the dashboard.

A trial row moves through these states:

    running --(attempt ends)--> completed | diverged | stopped | infeasible | failed   final
    running --(its process died, Ray Tune retries it)--> retrying --(next attempt)--> running
    running --(the search driver died; `nas resume` marks it)--> interrupted          replaced

`FINAL` are the outcomes that count towards the trials a search asked for; a `retrying` row is
about to run again and an `interrupted` one is replaced by a new trial on resume. Only `completed`
trials carry a loss that may sit on a Pareto front.
"""

from __future__ import annotations

from enum import Enum


class TrialStatus(str, Enum):
    """A trial's state; a `str`, so it compares equal to (and serialises as) its value."""

    RUNNING = "running"
    RETRYING = "retrying"  # an attempt failed; Ray Tune will start the next one
    COMPLETED = "completed"
    DIVERGED = "diverged"  # a NaN or inf training loss
    STOPPED = "stopped"  # cut short: time limit or early stopping (its partial loss is never on a front)
    INFEASIBLE = "infeasible"  # invalid config, or a budget below one training step: never trained
    FAILED = "failed"  # crashed (out of memory, an exception, a dead process) and not retried
    INTERRUPTED = "interrupted"  # the search driver stopped while it ran

    def __str__(self) -> str:
        return self.value


#: Outcomes that count as a finished trial of the search.
FINAL: frozenset[TrialStatus] = frozenset(
    {TrialStatus.COMPLETED, TrialStatus.DIVERGED, TrialStatus.STOPPED, TrialStatus.INFEASIBLE, TrialStatus.FAILED}
)
#: No result yet: the trial is running or about to run again.
PENDING: frozenset[TrialStatus] = frozenset({TrialStatus.RUNNING, TrialStatus.RETRYING})
