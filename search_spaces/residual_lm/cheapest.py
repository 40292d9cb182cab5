"""The cheapest valid `residual_lm` architecture among candidate knob values.

A search layer asks this before anything runs ("can the trial budget pay for one step of the
cheapest config of the space?"). The answer rests on how this family's executed forward FLOPs per
token (`flops.py`) grow with each knob, which is why it lives beside the FLOP accounting:

- monotone knobs (n_layers, d_model, mlp_ratio, seq_len, vocab_size, nag_gate_components): FLOPs
  never fall when one of them grows (more layers add terms; the others only grow existing terms:
  8d^2 and 6dh, the attended keys, the unembedding 2dV, the gate 2Cd), so each takes its smallest
  value;
- FLOP-free knobs (n_heads, ancre_tau, tie_embeddings): full-head attention costs 8 d^2 whatever
  n_heads is; they are chosen only to make the config valid. Validity couples d_model and n_heads
  (divisible, even head_dim), so d_model is scanned upwards until some n_heads is valid with it;
- every other knob (residual, mod_rate, mod_every, mod_routing...) is enumerated and the cheapest
  combination wins (the first one on ties). For a continuous knob the caller passes its two ends,
  which suffice: above 0 the executed FLOPs fall as mod_rate rises (plus a router cost that exists
  only above 0), so the minimum is at an end; mod_every only sets how many blocks are routed.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from .config import ArchConfig, config_error_message
from .flops import flops_per_token

MONOTONE = ("n_layers", "d_model", "mlp_ratio", "seq_len", "vocab_size", "nag_gate_components")
FLOP_FREE = ("n_heads", "ancre_tau", "tie_embeddings")


class NoValidConfig(ValueError):
    """No combination of the candidate values is a valid `ArchConfig`; the message is one example reason."""


def cheapest_config(fixed: Mapping[str, Any], candidates: Mapping[str, Sequence[Any]]) -> ArchConfig:
    """The valid config with the fewest expected executed forward FLOPs per token.

    `fixed`: ArchConfig fields held constant. `candidates`: for each searched ArchConfig field, the
    values it can take (every value of a discrete knob; the two ends of a continuous one). Raises
    `NoValidConfig` when no combination is valid.
    """
    ascending = {name: sorted(values) for name, values in candidates.items()}
    chosen = {
        name: values[0]
        for name, values in ascending.items()
        if name in MONOTONE + FLOP_FREE and name not in ("d_model", "n_heads")
    }
    widths = ascending.get("d_model", [None])
    heads = ascending.get("n_heads", [None])
    enumerated = {name: list(values) for name, values in candidates.items() if name not in MONOTONE + FLOP_FREE}
    best: tuple[float, ArchConfig] | None = None
    last_error = "no candidate"
    for combo in itertools.product(*enumerated.values()):
        base = {**fixed, **chosen, **dict(zip(enumerated, combo, strict=False))}
        try:
            cfg = _narrowest_valid(base, widths, heads)
        except NoValidConfig as err:
            last_error = str(err)
            continue
        cost = flops_per_token(cfg).executed
        if best is None or cost < best[0]:
            best = (cost, cfg)
    if best is None:
        raise NoValidConfig(last_error)
    return best[1]


def _narrowest_valid(base: dict, widths: Sequence, heads: Sequence) -> ArchConfig:
    """The first valid config scanning d_model upwards (then n_heads); NoValidConfig with the last reason."""
    reason = "no candidate"
    for d, h in itertools.product(widths, heads):
        values = {**base, **({"d_model": d} if d is not None else {}), **({"n_heads": h} if h is not None else {})}
        try:
            return ArchConfig(**values)
        except ValidationError as err:
            reason = config_error_message(err)
    raise NoValidConfig(reason)
