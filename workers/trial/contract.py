"""What the search and a proxy trial exchange, typed and defined once.

The search (`nas`) asks and a trial (this package) answers; nothing else crosses between them:

- `TrialTicket`: what the search computed about one sampled config before it runs: its trial number, its
  counted costs (`CountedCosts`: executed forward FLOPs per token, KV-cache bytes and decode FLOPs per token),
  the typed configs its knobs map to (`TrialConfigs`) and, when it will not be trained, why. Ray Tune hands a
  trial one dict, its config: the space's knobs, plus this ticket under `TICKET_KEY`, the one key that is not a
  knob (`with_ticket`, `split_config`).
- `TrialRequest`: what one trial is asked to do: the architecture, optimiser and run settings, the corpus, the
  seed, how it is measured (`LadderPlan`) and the rung gate it reports to.
- `RungGate`: what a trial calls at the end of every rung. It is told the rung's `RungRecord` and answers with a
  `RungVerdict`: `climb` to the next rung, `stop` here, or `measure_again` this rung with another seed
  (seed + `REMEASURE_SEED_OFFSET`); and what the search now predicts for the trial at the target. The search's
  gate stores the rung before it answers.
- `TrialOutcome`: what a trial returns: its `TrialResult` and the loss the search is told (its predicted loss at
  the target after its last rung, or the measured loss without rungs; +inf unless completed).

The records themselves live below this module (`workers.training.records`, `workers.trial.result`): the trainer
and the trial write them, the store keeps them field by field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from search_spaces.residual_lm import ArchConfig, flops_per_token

from ..data.config import DataConfig
from ..ladder.trial_plan import LadderPlan
from ..status import TrialStatus
from ..training.config import OptimConfig, RunConfig
from ..training.records import RungRecord
from .result import TrialResult

__all__ = [
    "REMEASURE_SEED_OFFSET",
    "TICKET_KEY",
    "CountedCosts",
    "RungGate",
    "RungVerdict",
    "TrialConfigs",
    "TrialOutcome",
    "TrialRequest",
    "TrialTicket",
    "Verdict",
    "split_config",
    "with_ticket",
]

TICKET_KEY = "resnas_ticket"  # the one key of a Tune trial's config that is not a knob of the space
REMEASURE_SEED_OFFSET = 1000  # a rung measured again runs seed + this (the front's repeats use seed + 1, + 2, ...)


@dataclass(frozen=True)
class CountedCosts:
    """A config's costs per token, counted from the config before any training: executed forward FLOPs (at the
    target skip rate; inf for an invalid config), and KV-cache bytes and decode FLOPs at its seq_len (None when the
    config is invalid). The store keeps them from the moment the trial starts."""

    executed_flops_per_token: float
    kv_bytes_per_token: float | None = None
    decode_flops_per_token: float | None = None


@dataclass(frozen=True)
class TrialConfigs:
    """The typed configs a sampled config's knobs map to (with the space's fixed values)."""

    arch: ArchConfig
    optim: OptimConfig
    run: RunConfig


@dataclass(frozen=True)
class TrialTicket:
    """What the search computed about one sampled config: its number (the Optuna trial's, which is the store's),
    its counted costs, its typed configs (None when the knobs make no valid config) and why it will not be trained
    (None: it will be)."""

    number: int
    costs: CountedCosts
    configs: TrialConfigs | None = None
    infeasible_reason: str | None = None


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


class Verdict(str, Enum):
    """What a trial does after a rung."""

    CLIMB = "climb"  # train the next rung
    STOP = "stop"  # end here: this is the trial's final verdict
    MEASURE_AGAIN = "measure_again"  # train this rung once more with another seed, then be judged again

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RungVerdict:
    """The search's answer at the end of a rung: its `verdict`, the trial's predicted loss at the target now, and
    with a `stop`, the prediction's band (None while uncalibrated). Built by `climb`, `stop` or `measure_again`."""

    verdict: Verdict
    predicted_loss: float
    band: tuple[float, float] | None = None

    @classmethod
    def climb(cls, predicted_loss: float) -> RungVerdict:
        return cls(Verdict.CLIMB, predicted_loss)

    @classmethod
    def stop(cls, predicted_loss: float, band: tuple[float, float] | None = None) -> RungVerdict:
        return cls(Verdict.STOP, predicted_loss, band)

    @classmethod
    def measure_again(cls, predicted_loss: float) -> RungVerdict:
        return cls(Verdict.MEASURE_AGAIN, predicted_loss)


class RungGate(Protocol):
    """What a trial calls at the end of every rung (picklable: Ray ships it to the trial's process): trial `trial`,
    whose executed forward FLOPs per token are `flops_per_token`, measured `rung` (its seed inside)."""

    def __call__(self, trial: int, flops_per_token: float, rung: RungRecord) -> RungVerdict: ...


@dataclass(frozen=True)
class TrialRequest:
    """What one trial is asked to do: train `arch` with `optim` and `run` on `data` from `seed`, measured as
    `ladder_plan` says, telling `rung_gate` every rung (None: no rung is reported, the last loss is told)."""

    ticket: TrialTicket
    arch: ArchConfig
    optim: OptimConfig
    run: RunConfig
    data: DataConfig
    seed: int
    ladder_plan: LadderPlan
    rung_gate: RungGate | None = None
    width_probe: bool = True  # measure the width certificate of the trained model

    @classmethod
    def of(
        cls,
        arch: ArchConfig,
        ladder_plan: LadderPlan,
        *,
        optim: OptimConfig = OptimConfig(),
        run: RunConfig = RunConfig(),
        data: DataConfig = DataConfig(),
        seed: int = 0,
        width_probe: bool = True,
    ) -> TrialRequest:
        """A request outside a search: trial 0, its FLOPs counted from `arch`, no rung gate."""
        ticket = TrialTicket(0, CountedCosts(flops_per_token(arch).executed), TrialConfigs(arch, optim, run))
        return cls(ticket, arch, optim, run, data, seed, ladder_plan, None, width_probe)


@dataclass(frozen=True)
class TrialOutcome:
    """What a trial returns: its result and the loss the search is told (`told_loss`)."""

    number: int
    result: TrialResult
    told_loss: float

    @property
    def status(self) -> TrialStatus:
        return TrialStatus(self.result.status)

    @staticmethod
    def told(result: TrialResult, predicted: float | None) -> float:
        """The loss a trial tells: +inf unless completed; then the search's prediction if it gave one, else
        the measured loss."""
        if result.status != TrialStatus.COMPLETED:
            return math.inf
        return result.val_loss if predicted is None else predicted
