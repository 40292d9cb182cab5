"""Inference cost of a `residual_lm` model, factor by factor: KV-cache bytes and decode FLOPs per token.

One sequence generates the token after `context` cached ones (`kv_cache`). Attention is full-head:
a cached position holds one key and one value of d = n_heads x head_dim elements.

KV cache after c tokens:

    sum over blocks j of   2               K and V
                         x d               one key (and value) per position, full-head
                         x bytes           per element of the cache's dtype
                         x positions_j     the positions block j's attention executed: c on a dense
                                           block; on a routed one (1 - mod_rate) c in expectation, or
                                           the realised count (`held`)

A routed attention stores only the positions it executed, so the cache shrinks on routed blocks only:
with every other block routed at 0.875 (the MoD paper's best) it holds (1 + 0.125) / 2 = 0.5625 of the
dense cache.

Decode FLOPs of the next token: a one-token forward (`flops.forward_flops` at T = 1, each routed
sublayer executing with probability 1 - mod_rate: projections, MLP, routers, NAG gates, ANCRe mixing
and unembedding counted there), except the attention core, which reads the cache:

    attn_core     sum over blocks j of   P(the token executes attention j)
                                       x 4 d (positions_j + 1)    QK^T and AV over the keys held and its own

so on a routed block the attention core falls by (1 - mod_rate)^2: the token executes with probability
1 - mod_rate, and then reads (1 - mod_rate) c keys. Nominal counts execute every pair and hold every
position (the dense model plus the routers' scores).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .config import ArchConfig
from .flops import SublayerKey, forward_flops

if TYPE_CHECKING:  # a cache's dtype; counting needs no torch
    import torch

FP32_BYTES = 4  # a cache of unspecified dtype holds float32

__all__ = ["DecodeCost", "decode_cost", "decode_flops", "kv_cache_bytes"]


@dataclass(frozen=True)
class DecodeCost:
    """Generating one token after `context` cached ones: expected under MoD (executed) and nominal."""

    context: int
    kv_bytes_per_token: float  # the cache's bytes per context token
    kv_bytes_per_token_nominal: float  # every position held in every layer
    flops_per_token: float
    flops_per_token_nominal: float
    flops_breakdown: dict[str, float]  # executed, by component (`flops.forward_flops`'s keys)


def kv_cache_bytes(
    cfg: ArchConfig, context: int, dtype: torch.dtype | None = None, held: Mapping[int, float] | None = None
) -> float:
    """Bytes of the keys and values one sequence's cache holds after `context` tokens, in a cache of `dtype`
    (None: float32). `held[j]` is the positions block j's attention executed (realised); missing, the expected
    count at `cfg.mod_rate`."""
    itemsize = FP32_BYTES if dtype is None else dtype.itemsize
    per_position = 2 * cfg.d_model * itemsize  # K and V, full-head, in the cache's dtype
    return sum(per_position * _positions(cfg, j, context, held) for j in range(1, cfg.n_layers + 1))


def decode_flops(cfg: ArchConfig, context: int, skip_rate: float | None = None) -> dict[str, float]:
    """Expected forward FLOPs of the token generated after `context` cached ones, by component; each routed
    sublayer skips with probability `skip_rate` (default `cfg.mod_rate`; 0 for the nominal count)."""
    rate = cfg.mod_rate if skip_rate is None else skip_rate
    executes: dict[SublayerKey, float] = {(k, j): 1.0 - rate for j in cfg.routed_blocks for k in ("attn", "mlp")}
    parts = {k: float(v) for k, v in forward_flops(cfg, 1, executes).items()}
    held = {j: (1.0 - rate) * context for j in cfg.routed_blocks}
    parts["attn_core"] = sum(
        executes.get(("attn", j), 1.0) * 4 * cfg.d_model * (_positions(cfg, j, context, held) + 1)
        for j in range(1, cfg.n_layers + 1)
    )
    return parts


def decode_cost(cfg: ArchConfig, context: int, dtype: torch.dtype | None = None) -> DecodeCost:
    """KV-cache bytes and decode FLOPs per token at `context`, expected and nominal (a cache of `dtype`; None:
    float32)."""
    dense = {j: float(context) for j in cfg.routed_blocks}
    executed = decode_flops(cfg, context)
    return DecodeCost(
        context=context,
        kv_bytes_per_token=kv_cache_bytes(cfg, context, dtype) / context,
        kv_bytes_per_token_nominal=kv_cache_bytes(cfg, context, dtype, held=dense) / context,
        flops_per_token=sum(executed.values()),
        flops_per_token_nominal=sum(decode_flops(cfg, context, skip_rate=0.0).values()),
        flops_breakdown=executed,
    )


def _positions(cfg: ArchConfig, block: int, context: int, held: Mapping[int, float] | None) -> float:
    """Positions block `block`'s attention holds after `context` tokens: `held`'s, else context on a dense
    block and (1 - mod_rate) context on a routed one."""
    if held is not None and block in held:
        return held[block]
    return (1.0 - cfg.mod_rate) * context if block in cfg.routed_blocks else float(context)
