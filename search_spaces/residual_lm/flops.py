"""Forward FLOPs of a `residual_lm` model, factor by factor (docs/design.md §3.5).

Convention: matmul FLOPs only, 2 per multiply-add; norms, softmax, RoPE and elementwise
updates are not counted. Training costs 3x the forward pass. Per sequence of T tokens:

    attention sublayer executing c tokens   8 d^2 c                  Q, K, V, O projections
                                          + 4 d c (c + 1) / 2        QK^T and AV over the causal keys
    SwiGLU MLP executing c tokens           6 d h c                  gate, up (d x 2h) and down (h x d)
    router of a routed sublayer (not NAG)   2 d T                    r = w . x, every token is scored
                                                                     (one router per block with
                                                                     mod_granularity "block")
    MoD predictor (mod_routing "predictor") 2 H (d + 1) T            per router, NAG included; H = 32
    NAG gate, every sublayer                2 C d T                  the C pre-activations w_c . u
                                                                     (a block-routed block's MLP: 2 C d c)
    ANCRe mixing into block j               2 j d T                  sum_i p_ij o_i over j states
    unembedding                             2 d V T

Dense sublayers execute c = T tokens. `flops_per_token(cfg)` gives the nominal count (every pair
executed) and the expected executed count (routed sublayers executing c = (1 - mod_rate) T);
`forward_flops(cfg, T, counts)` gives what a real forward executed, from the routers' counts.

The iso-FLOP rule lives here too (one place for "training = 3x forward"): a model whose executed
forward pass costs F FLOPs per token spends `training_flops(cfg, D) = 3 F D` to train on D tokens,
and a training budget C buys `tokens_for(cfg, C) = C / (3 F)` tokens.

On CPU, `torch.utils.flop_counter.FlopCounterMode` counts matmuls only: it misses the fused SDPA
kernel and the fused ANCRe mix (a multiply-add, `ops.ancre_mix`), so it sees exactly this total
minus the `attn_core` and `ancre_mix` terms; the tests check that equality and those two apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Real
from typing import TYPE_CHECKING, TypeAlias

from .config import PREDICTOR_HIDDEN, ArchConfig

if TYPE_CHECKING:  # counts arrive as tensors from a model's routers; sizing a config needs no torch
    from torch import Tensor

#: Training FLOPs per forward FLOP: the backward pass costs twice the forward (gradients with
#: respect to activations and to weights), so a training step costs 3x its forward pass.
TRAINING_FLOPS_PER_FORWARD_FLOP = 3.0

Count: TypeAlias = "float | Tensor"  # executed tokens per sequence: a number, or a (B,) tensor
SublayerKey = tuple[str, int]  # ("attn" | "mlp", 1-based block index)


@dataclass(frozen=True)
class FlopsPerToken:
    """Forward FLOPs per token: every pair executed (nominal) and at the target skip rate (executed)."""

    nominal: float
    executed: float
    executed_breakdown: dict[str, float]


def _tokens_and_key_pairs(count: Count, batch: int) -> tuple[float | Tensor, float | Tensor]:
    """Executed tokens and causal (query, key) pairs over the batch: sum c and sum c (c + 1) / 2."""
    if isinstance(count, float | int | Real):  # a number (numpy's too)
        return batch * count, batch * count * (count + 1) / 2
    return count.sum(), (count * (count + 1) // 2).sum()  # realised integer counts per sequence: stay exact


def forward_flops(cfg: ArchConfig, seq_len: int, counts: Mapping[SublayerKey, Count], batch: int = 1) -> dict:
    """FLOPs of one forward pass over `batch` sequences of `seq_len`, by component.

    `counts[(kind, j)]` is the executed tokens per sequence of that sublayer; missing means dense (T).
    Values are numbers, or 0-d tensors when counts are tensors (no host sync).
    """
    d, T, n = cfg.d_model, seq_len, batch
    routed = set(cfg.routed_blocks)
    parts: dict[str, Count] = dict.fromkeys(
        ("attn_proj", "attn_core", "mlp", "router", "nag_gate", "ancre_mix", "unembed"), 0
    )
    for j in range(1, cfg.n_layers + 1):
        attn_tokens, key_pairs = _tokens_and_key_pairs(counts.get(("attn", j), T), n)
        mlp_tokens, _ = _tokens_and_key_pairs(counts.get(("mlp", j), T), n)
        parts["attn_proj"] += 8 * d * d * attn_tokens
        parts["attn_core"] += 4 * d * key_pairs
        parts["mlp"] += 6 * d * cfg.mlp_hidden * mlp_tokens
        if j in routed:
            routers = 1 if cfg.mod_granularity == "block" else 2  # one per block, or attention's and MLP's
            per_token = 0 if cfg.residual == "nag" else 2 * d  # r = w . x (NAG scores by its own gate)
            if cfg.mod_routing == "predictor":
                per_token += 2 * PREDICTOR_HIDDEN * (d + 1)  # the auxiliary predictor's two layers
            parts["router"] += routers * per_token * T * n  # every token is scored
        if cfg.residual == "nag":  # attention's gate scores every token; the MLP's too, unless the block is
            # routed as a whole (then the MLP runs, gate included, on the block's executed tokens only)
            mlp_gated = mlp_tokens if j in routed and cfg.mod_granularity == "block" else T * n
            parts["nag_gate"] += 2 * cfg.nag_gate_components * d * (T * n + mlp_gated)
        if cfg.residual == "ancre":
            parts["ancre_mix"] += 2 * j * d * T * n
    parts["unembed"] = 2 * d * cfg.vocab_size * T * n
    return parts


def expected_counts(cfg: ArchConfig, seq_len: int) -> dict[SublayerKey, float]:
    """Executed tokens per sequence of each routed sublayer at the target rate: (1 - mod_rate) T."""
    kept = (1.0 - cfg.mod_rate) * seq_len
    if cfg.mod_routing in ("topk", "predictor"):  # training keeps each sequence's top-k
        kept = float(max(1, round(kept)))
    return {(kind, j): kept for j in cfg.routed_blocks for kind in ("attn", "mlp")}


def flops_per_token(cfg: ArchConfig, seq_len: int | None = None) -> FlopsPerToken:
    """Nominal and expected-executed forward FLOPs per token at context length seq_len (default cfg.seq_len)."""
    T = seq_len or cfg.seq_len
    nominal = forward_flops(cfg, T, {})
    executed = forward_flops(cfg, T, expected_counts(cfg, T))
    return FlopsPerToken(
        nominal=sum(nominal.values()) / T,
        executed=sum(executed.values()) / T,
        executed_breakdown={k: v / T for k, v in executed.items()},
    )


def training_flops(cfg: ArchConfig, tokens: float) -> float:
    """Training FLOPs of `tokens` tokens: 3 x expected executed forward FLOPs per token x tokens."""
    return TRAINING_FLOPS_PER_FORWARD_FLOP * flops_per_token(cfg).executed * tokens


def tokens_for(cfg: ArchConfig, flops: float) -> float:
    """Tokens that `flops` training FLOPs buy (not rounded): C / (3 x expected executed forward FLOPs per token)."""
    return flops / (TRAINING_FLOPS_PER_FORWARD_FLOP * flops_per_token(cfg).executed)


def forward_flops_per_token(training: float, tokens: float) -> float:
    """The forward FLOPs per token that `training` FLOPs over `tokens` tokens imply: C / (3 D)."""
    return training / (TRAINING_FLOPS_PER_FORWARD_FLOP * tokens)
