"""Parts shared by every residual family: RoPE, causal self-attention, SwiGLU MLP.

Sublayers accept either a dense batch x: (B, T, d), or the executed tokens of a routed
sublayer x: (N, d) together with their `TokenSelection`. Attention then runs over the
selected tokens only (keys and queries alike), with RoPE at their original positions.
Each sublayer multiplies its output by `output_multiplier`: CompleteP's branch multiplier 1/m_L
in the pre-norm families, 1 elsewhere (and skipped when 1). While an attention holds a `LayerKV`
(`kv`, set by `ResidualLM.decoding`), its input continues the cached positions (`kv_cache`).
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
        if self.kv is not None:
            return scaled(self.out_proj(self._attend_cached(self.kv, x, sel)), self.output_multiplier)
        qkv = self.qkv(x).unflatten(-1, (3, self.n_heads, self.head_dim))  # (B, T, 3, nh, hs) or (N, ...)
        if sel is None:
            return scaled(self.out_proj(self._attend(qkv, self.freqs[: x.shape[1]])), self.output_multiplier)
        if sel.max_count == 0:
            return x  # (0, d): nothing executed
        # Pad per sequence: kept tokens stay in order, so a causal mask over the compact index is
        # causal over the original positions, and padding sits after every real key.
        padded = qkv.new_zeros(sel.batch * sel.max_count, *qkv.shape[1:]).index_copy(0, sel.padded_index, qkv)
        positions = sel.positions.new_zeros(sel.batch * sel.max_count).index_copy(0, sel.padded_index, sel.positions)
        freqs = self.freqs[positions].unflatten(0, (sel.batch, sel.max_count))  # (B, K, hs/2)
        y = self._attend(padded.unflatten(0, (sel.batch, sel.max_count)), freqs)  # (B, K, d)
        return scaled(self.out_proj(y.flatten(0, 1).index_select(0, sel.padded_index)), self.output_multiplier)

    def _attend_cached(self, kv: LayerKV, x: Tensor, sel: TokenSelection | None) -> Tensor:
        """Attention of the T new positions over the cache and themselves: (B, T, d), or (N, d) for `sel`'s
        tokens. The new positions are appended to `kv` (all of them; valid where executed)."""
        if sel is None:
            qkv = self.qkv(x).unflatten(-1, (3, self.n_heads, self.head_dim))  # (B, T, 3, nh, hs)
            executed = torch.ones(qkv.shape[:2], dtype=torch.bool, device=x.device)
        else:
            batch, steps = sel.keep.shape
            rows = self.qkv(x).unflatten(-1, (3, self.n_heads, self.head_dim))  # (N, 3, nh, hs)
            qkv = (
                rows.new_zeros(batch * steps, *rows.shape[1:])
                .index_copy(0, sel.index, rows)
                .unflatten(0, (batch, steps))
            )
            executed = sel.keep
        start, steps = kv.length, qkv.shape[1]
        if start + steps > self.freqs.shape[0]:
            raise ValueError(f"decoding: position {start + steps} is past the model's seq_len {self.freqs.shape[0]}")
        qk = apply_rope(qkv[:, :, :2], self.freqs[start : start + steps, None, None, :])
        q, k = qk.transpose(1, 3).unbind(2)  # (B, nh, T, hs)
        keys, values, valid = kv.append(k, qkv[:, :, 2].transpose(1, 2), executed)
        position = torch.arange(start + steps, device=x.device)
        query_position = position[start:, None]  # (T, 1)
        mask = (position <= query_position) & valid[:, None, :]  # (B, T, S)
        mask |= position == query_position  # a skipped query attends to itself (its output is dropped)
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask[:, None], scale=self.scale)
        y = y.transpose(1, 2).flatten(2)  # (B, T, d)
        return y if sel is None else y.flatten(0, 1).index_select(0, sel.index)

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
