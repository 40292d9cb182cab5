"""Parts shared by every residual family: RoPE, causal self-attention, SwiGLU MLP.

Sublayers accept either a dense batch x: (B, T, d), or the executed tokens of a routed
sublayer x: (N, d) together with their `TokenSelection`. Attention then runs over the
selected tokens only (keys and queries alike), with RoPE at their original positions.
Each sublayer multiplies its output by `output_multiplier`: CompleteP's branch multiplier 1/m_L
in the pre-norm families, 1 elsewhere (and skipped when 1). While an attention holds a `LayerKV`
(`kv`, set by `ResidualLM.decoding`), its input continues the cached positions and only its executed
tokens' keys and values are stored (`kv_cache`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import ArchConfig
from .kv_cache import LayerKV
from .parametrization import attention_scale
from .routing import TokenSelection


def rope_frequencies(seq_len: int, head_dim: int, base: float = 10000.0) -> Tensor:
    """exp(i t theta_k), theta_k = base^(-2k/hs): complex (seq_len, head_dim // 2) (Su et al. 2021)."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    return torch.polar(torch.ones_like(angles), angles)


def apply_rope(x: Tensor, freqs: Tensor) -> Tensor:
    """Rotate the pairs (x_2k, x_2k+1) of x: (..., hs) by the angles of freqs (..., hs/2), complex.

    One complex multiply instead of split/rotate/concatenate: 2.3x faster forward+backward on CPU.
    """
    pairs = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))
    return torch.view_as_real(pairs * freqs).flatten(-2).type_as(x)


def padded_rows(rows: Tensor, sel: TokenSelection) -> tuple[Tensor, Tensor]:
    """`sel`'s executed rows (N, ...) laid out per sequence, (B, K, ...) with K = sel.max_count, zero
    padded, and their positions (B, K). Kept tokens stay in order, so a causal mask over the compact
    index is causal over the original positions, and padding sits after every real row."""
    padded = rows.new_zeros(sel.batch * sel.max_count, *rows.shape[1:]).index_copy(0, sel.padded_index, rows)
    positions = sel.positions.new_zeros(sel.batch * sel.max_count).index_copy(0, sel.padded_index, sel.positions)
    return padded.unflatten(0, (sel.batch, sel.max_count)), positions.unflatten(0, (sel.batch, sel.max_count))


def scaled(y: Tensor, multiplier: float) -> Tensor:
    """y * multiplier, and y itself when the multiplier is 1 (`standard` stays bit-exact)."""
    return y if multiplier == 1.0 else y * multiplier


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention: 8 d^2 projection FLOPs per token plus 4 d per attended key."""

    freqs: Tensor  # buffer, registered in __init__ (declared here for type checkers)

    def __init__(self, cfg: ArchConfig, output_multiplier: float = 1.0):
        super().__init__()
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.scale = attention_scale(cfg)  # None: SDPA's 1/sqrt(head_dim)
        self.output_multiplier = output_multiplier
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.register_buffer("freqs", rope_frequencies(cfg.seq_len, cfg.head_dim), persistent=False)
        self.kv: LayerKV | None = None  # set while decoding with a cache

    def forward(self, x: Tensor, sel: TokenSelection | None = None) -> Tensor:
        qkv = self.qkv(x).unflatten(-1, (3, self.n_heads, self.head_dim))  # (B, T, 3, nh, hs) or (N, ...)
        if self.kv is not None:
            return scaled(self.out_proj(self._attend_cached(self.kv, qkv, sel)), self.output_multiplier)
        if sel is None:
            return scaled(self.out_proj(self._attend(qkv, self.freqs[: x.shape[1]])), self.output_multiplier)
        if sel.max_count == 0:
            return x  # (0, d): nothing executed
        padded, positions = padded_rows(qkv, sel)
        y = self._attend(padded, self.freqs[positions])  # (B, K, d)
        return scaled(self.out_proj(y.flatten(0, 1).index_select(0, sel.padded_index)), self.output_multiplier)

    def _attend_cached(self, kv: LayerKV, qkv: Tensor, sel: TokenSelection | None) -> Tensor:
        """Attention of the new executed tokens over the keys `kv` holds and their own, which it then holds:
        qkv (B, T, 3, nh, hs) -> (B, T, d), or (N, 3, nh, hs) for `sel`'s tokens -> (N, d)."""
        if sel is None:
            freqs, counts = self.freqs[kv.start : kv.start + qkv.shape[1]], None  # (T, hs/2)
        else:
            qkv, positions = padded_rows(qkv, sel)  # (B, K, 3, nh, hs)
            freqs, counts = self.freqs[kv.start + positions], sel.counts  # (B, K, hs/2)
        qk = apply_rope(qkv[:, :, :2], freqs[..., None, None, :])
        q, k = qk.transpose(1, 3).unbind(2)  # (B, nh, T, hs)
        first = kv.append(k, qkv[:, :, 2].transpose(1, 2), counts)
        mask, steps = kv.mask(first, q.shape[2]), q.shape[2]
        y = F.scaled_dot_product_attention(
            q, *kv.held(), attn_mask=mask, is_causal=mask is None and steps > 1, scale=self.scale
        )
        y = y.transpose(1, 2).flatten(2)  # (B, T, d)
        return y if sel is None else y.flatten(0, 1).index_select(0, sel.padded_index)

    def _attend(self, qkv: Tensor, freqs: Tensor) -> Tensor:
        """Causal attention of qkv: (B, T, 3, nh, hs), RoPE freqs (T or (B, T), hs/2) -> (B, T, d)."""
        qk = apply_rope(qkv[:, :, :2], freqs[..., None, None, :])  # q and k at once
        q, k = qk.transpose(1, 3).unbind(2)  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, qkv[:, :, 2].transpose(1, 2), is_causal=True, scale=self.scale)
        return y.transpose(1, 2).flatten(2)


class SwiGLU(nn.Module):
    """w_out(silu(x W_gate) * (x W_up)): 6 d h FLOPs per token (Shazeer 2020)."""

    def __init__(self, cfg: ArchConfig, output_multiplier: float = 1.0):
        super().__init__()
        self.output_multiplier = output_multiplier
        self.w_in = nn.Linear(cfg.d_model, 2 * cfg.mlp_hidden, bias=False)  # gate and up, fused
        self.w_out = nn.Linear(cfg.mlp_hidden, cfg.d_model, bias=False)

    def forward(self, x: Tensor, sel: TokenSelection | None = None) -> Tensor:
        gate, up = self.w_in(x).chunk(2, dim=-1)
        return scaled(self.w_out(F.silu(gate) * up), self.output_multiplier)
