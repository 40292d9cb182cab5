"""What the search and a proxy trial exchange, typed and defined once.

The search (`nas`) asks and a trial (this package) answers; nothing else crosses between them:

- `TrialTicket`: what the search computed about one sampled config before it runs: its trial number, its
  executed forward FLOPs per token and, when it will not be trained, why. Ray Tune hands a trial one dict,
  its config: the space's knobs, plus this ticket under `TICKET_KEY`, the one key that is not a knob
  (`with_ticket`, `split_config`).
- `TrialRequest`: what one trial is asked to do: the architecture, optimiser and run settings the knobs
  map to, the corpus, the seed, how it is measured (`Measurement`) and the rung gate it reports to.
- `RungGate`: what a trial calls at the end of every rung. It is told the rung's record and answers with a
  `RungVerdict`: climb on, stop here, or measure this rung again with another seed; and what the search now
  predicts for the trial at the target. The search's gate stores the rung before it answers.
- `TrialOutcome`: what a trial returns: its `TrialResult` and the loss the search is told (its predicted
  loss at the target after its last rung, or the measured loss without rungs; +inf unless completed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from search_spaces.residual_lm import ArchConfig

from ..data.config import DataConfig
from ..status import TrialStatus
from ..training.plans import LadderConfig
from ..training.train import OptimConfig, RunConfig
from .narrowing import Narrowing
from .run import TrialResult

__all__ = [
    "TICKET_KEY",
    "Measurement",
    "RungGate",
    "RungVerdict",
    "TrialOutcome",
    "TrialRequest",
    "TrialTicket",
    "split_config",
    "with_ticket",
]

TICKET_KEY = "resnas_ticket"  # the one key of a Tune trial's config that is not a knob of the space


@dataclass(frozen=True)
class TrialTicket:
    """What the search computed about one sampled config: its number (the Optuna trial's, which is the store's),
    its executed forward FLOPs per token (inf when the config is invalid), why it will not be trained
    (None: it will be), and its counted inference costs at its seq_len (None when the config is invalid)."""

    number: int
    executed_flops_per_token: float
    infeasible_reason: str | None = None
    kv_bytes_per_token: float | None = None
    decode_flops_per_token: float | None = None


def with_ticket(knobs: Mapping[str, Any], ticket: TrialTicket) -> dict[str, Any]:
    """A Tune trial's config: the space's knobs and the ticket."""
    if TICKET_KEY in knobs:
        raise ValueError(f"{TICKET_KEY!r} is reserved: it cannot be a knob of the space")
    return {**knobs, TICKET_KEY: ticket}


def split_config(config: Mapping[str, Any]) -> tuple[dict[str, Any], TrialTicket]:
    """A Tune trial's config as (the space's knobs, the ticket); ValueError when it carries no ticket."""
    ticket = config.get(TICKET_KEY)
    if not isinstance(ticket, TrialTicket):
        raise ValueError(f"a trial's config carries no {TICKET_KEY!r} (got {type(ticket).__name__})")
    return {k: v for k, v in config.items() if k != TICKET_KEY}, ticket


@dataclass(frozen=True)
class Measurement:
    """How a trial is measured. Replica rungs (`replica_rungs`, their budgets lowest first): each rung its own
    run of a copy narrowed as `narrowing` says, on the target's path to `target_flops` (`workers.trial.replica`).
    Otherwise the config itself at `budget_flops` (the top rung's), on a budget `ladder` with a cooldown branch at
    each rung, or at that single budget without one."""

    budget_flops: float
    ladder: LadderConfig | None = None
    replica_rungs: tuple[float, ...] = ()
    target_flops: float | None = None
    narrowing: Narrowing = Narrowing()

    def __post_init__(self) -> None:
        if self.replica_rungs and self.target_flops is None:
            raise ValueError("replica rungs need the target's training FLOPs (target_flops)")


@dataclass(frozen=True)
class RungVerdict:
    """The search's answer at the end of a rung: go on to the next rung, or stop (`promote`), or first measure
    this rung again with another seed (`measure_again`); the trial's predicted loss at the target now, and its
    band when this is the trial's final verdict (None while uncalibrated)."""

    promote: bool
    predicted_loss: float
    band: tuple[float, float] | None = None
    measure_again: bool = False


class RungGate(Protocol):
    """What a trial calls at the end of every rung (picklable: Ray ships it to the trial's process).

    `rung` is the rung's record as the trainer wrote it (`workers.training.train` for a budget ladder,
    `workers.trial.replica` for replica rungs: rung, seed, budget_flops, tokens, val_loss, training_flops, ...).
    """

    def __call__(self, trial: int, seed: int, flops_per_token: float, rung: dict) -> RungVerdict: ...


@dataclass(frozen=True)
class TrialRequest:
    """What one trial is asked to do: train `arch` with `optim` and `run` on `data` from `seed`, measured as
    `measurement` says, telling `rung_gate` every rung (None: no rung is reported, the last loss is told)."""

    ticket: TrialTicket
    arch: ArchConfig
    optim: OptimConfig
    run: RunConfig
    data: DataConfig
    seed: int
    measurement: Measurement
    rung_gate: RungGate | None = None
    width_probe: bool = True  # measure the width certificate of the trained model


@dataclass(frozen=True)
class TrialOutcome:
    """What a trial returns: its result and the loss the search is told (`told_loss`)."""

    number: int
    result: TrialResult
    told_loss: float

    @property
    def status(self) -> TrialStatus:
        return TrialStatus(self.result.status)

    def record(self) -> dict:
        """The result as the store keeps it: `TrialResult.to_dict()` and `target_loss` (the told loss)."""
        return {**self.result.to_dict(), "target_loss": self.told_loss}

    @staticmethod
    def told(result: TrialResult, predicted: float | None) -> float:
        """The loss a trial tells: +inf unless completed; then the search's prediction if it gave one, else
        the measured loss."""
        if result.status != TrialStatus.COMPLETED:
            return math.inf
        return result.val_loss if predicted is None else predicted
