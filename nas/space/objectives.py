"""What a search minimises, and each cost of a stored trial: one vocabulary for the search, its promotion,
its front at the target, `nas show`, export and the dashboard.

`Objective` names them as `nas search --objectives` spells them: `loss` (the loss predicted at the target,
`nas.answer.target`), `flops` (executed forward FLOPs per token: the cost of training and of a prompt) and
`kv` (KV-cache bytes per context token: the memory a long generation holds). A search minimises
`loss,flops` (the default) or `loss,flops,kv`, and stores the choice in its settings (`objectives_of`).

Inference costs are counted, never measured (`search_spaces.residual_lm.decode_cost`), at the config's
own context `seq_len` (the longest it trains and runs at), with a float32 cache, expected under MoD:

    kv_bytes_per_token       = kv_cache_bytes(cfg, seq_len) / seq_len
    decode_flops_per_token   = decode FLOPs of the token generated after seq_len cached ones

A trial's are stored with it (`Store.start_trial`); a row without them (a store from before) has them
computed from its config's architecture here (`inference_cost_of`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pydantic import ValidationError

from search_spaces.residual_lm import ArchConfig
from search_spaces.residual_lm.decode_cost import decode_cost

Cost = Callable[[Any], float | None]  # a row's cost (a front's x), None where it has none: `nas.answer.pareto`'s

__all__ = [
    "DEFAULT_OBJECTIVES",
    "OBJECTIVE_CHOICES",
    "REPORT_KEYS",
    "InferenceCost",
    "Objective",
    "cost_key",
    "decode_flops_of",
    "front_costs",
    "inference_cost",
    "inference_cost_of",
    "kv_bytes_of",
    "objectives_of",
    "parse_objectives",
]


class Objective(str, Enum):
    """One objective a search minimises, as `--objectives` spells it."""

    LOSS = "loss"
    FLOPS = "flops"
    KV = "kv"

    def __str__(self) -> str:
        return self.value


# The objective sets a search may minimise: the loss and executed FLOPs always, KV bytes optionally.
OBJECTIVE_CHOICES: tuple[tuple[Objective, ...], ...] = (
    (Objective.LOSS, Objective.FLOPS),
    (Objective.LOSS, Objective.FLOPS, Objective.KV),
)
DEFAULT_OBJECTIVES = OBJECTIVE_CHOICES[0]
# Each objective's key in a trial's Tune report, its stored result and the trial row.
REPORT_KEYS = {
    Objective.LOSS: "target_loss",
    Objective.FLOPS: "executed_flops_per_token",
    Objective.KV: "kv_bytes_per_token",
}


def _spelled(objectives: Sequence[Objective]) -> str:
    return ",".join(o.value for o in objectives)


def parse_objectives(value: str | Sequence[str]) -> tuple[Objective, ...]:
    """`loss,flops` or `loss,flops,kv` (a string or a sequence of names) as objectives; ValueError naming the
    accepted values otherwise."""
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [str(n.value if isinstance(n, Objective) else n).strip() for n in names]
    for choice in OBJECTIVE_CHOICES:
        if names == [o.value for o in choice]:
            return choice
    accepted = " or ".join(_spelled(c) for c in OBJECTIVE_CHOICES)
    raise ValueError(f"must be {accepted}")


def objectives_of(settings: Mapping[str, Any] | None) -> tuple[Objective, ...]:
    """The objectives a search stored in its settings (`SearchSettings.objectives`); settings that name none
    minimised the default."""
    stored = (settings or {}).get("objectives")
    return DEFAULT_OBJECTIVES if not stored else parse_objectives(stored)


@dataclass(frozen=True)
class InferenceCost:
    """A config's counted inference costs at `context` = its seq_len (module docstring)."""

    context: int
    kv_bytes_per_token: float
    decode_flops_per_token: float


def inference_cost(arch: ArchConfig | Mapping[str, Any] | None) -> InferenceCost | None:
    """The counted costs of an architecture (a config or its fields) at its seq_len; None when it is missing
    or invalid (an untrained proposal)."""
    if arch is None or (isinstance(arch, Mapping) and not arch):
        return None
    try:
        cfg = arch if isinstance(arch, ArchConfig) else ArchConfig.model_validate(dict(arch))
    except ValidationError:
        return None
    cost = decode_cost(cfg, cfg.seq_len)
    return InferenceCost(cfg.seq_len, cost.kv_bytes_per_token, cost.flops_per_token)


def inference_cost_of(row) -> InferenceCost | None:
    """A trial row's costs: the stored ones, or, when it has none, counted from its config's `arch`."""
    arch = (getattr(row, "config", None) or {}).get("arch")
    kv, decode = getattr(row, "kv_bytes_per_token", None), getattr(row, "decode_flops_per_token", None)
    if kv is not None and decode is not None:
        context = int(arch.get("seq_len", 0)) if isinstance(arch, Mapping) else 0
        return InferenceCost(context, kv, decode)
    return inference_cost(arch if isinstance(arch, Mapping) else None)


def kv_bytes_of(row) -> float | None:
    """A row's KV-cache bytes per token at its seq_len (None when unknown): a `pareto_rows` cost."""
    cost = inference_cost_of(row)
    return None if cost is None else cost.kv_bytes_per_token


def decode_flops_of(row) -> float | None:
    """A row's decode FLOPs per token at its seq_len (None when unknown): a `pareto_rows` cost."""
    cost = inference_cost_of(row)
    return None if cost is None else cost.decode_flops_per_token


def _executed(row) -> float | None:
    return row.executed_flops_per_token


def cost_key(objective: Objective) -> Cost:
    """The row cost a front reads for a cost objective."""
    if objective is Objective.LOSS:
        raise ValueError("the loss is a front's y, not a cost")
    return kv_bytes_of if objective is Objective.KV else _executed


def front_costs(objectives: Sequence[Objective]) -> tuple[Cost, tuple[Cost, ...]]:
    """(the front's x, the further costs it is non-dominated on) for a search's objectives: executed FLOPs
    per token, and KV bytes per token too when the search minimises them (`pareto_rows`' `key` and `also`)."""
    costs = [cost_key(o) for o in objectives if o is not Objective.LOSS]
    return costs[0], tuple(costs[1:])
