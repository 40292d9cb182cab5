"""Parts shared by every residual family: RoPE, causal self-attention, SwiGLU MLP.

Sublayers accept either a dense batch x: (B, T, d), or the executed tokens of a routed
sublayer x: (N, d) together with their `TokenSelection`. Attention then runs over the
selected tokens only (keys and queries alike), with RoPE at their original positions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import ArchConfig
from .routing import TokenSelection


def rope_tables(seq_len: int, head_dim: int, base: float = 10000.0) -> tuple[Tensor, Tensor]:
    """cos, sin of angle t * base^(-2i/hd), each (seq_len, head_dim // 2) (Su et al. 2021)."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate the pairs (x_i, x_{i + hd/2}) of x: (..., hd) by the angles in cos/sin (..., hd/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention: 8 d^2 projection FLOPs per token plus 4 d per attended key."""

    def __init__(self, cfg: ArchConfig):
        super().__init__()
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        cos, sin = rope_tables(cfg.seq_len, cfg.head_dim)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: Tensor, sel: TokenSelection | None = None) -> Tensor:
        if sel is None:
            return self.out_proj(self._attend_dense(x))
        return self.out_proj(self._attend_selected(x, sel))

    def _split_heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = self.qkv(x).unflatten(-1, (3, self.n_heads, self.head_dim)).unbind(-3)
        return q, k, v  # each (..., nh, hs)

    def _attend_dense(self, x: Tensor) -> Tensor:
        seq_len = x.shape[1]
        q, k, v = self._split_heads(x)  # (B, T, nh, hs)
        cos, sin = self.cos[:seq_len, None], self.sin[:seq_len, None]  # (T, 1, hs/2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return y.transpose(1, 2).flatten(2)  # (B, T, d)

    def _attend_selected(self, x: Tensor, sel: TokenSelection) -> Tensor:
        if sel.max_count == 0:
            return x  # (0, d): nothing executed
        q, k, v = self._split_heads(x)  # (N, nh, hs)
        cos, sin = self.cos[sel.positions, None], self.sin[sel.positions, None]  # (N, 1, hs/2)
        qkv = torch.stack((apply_rope(q, cos, sin), apply_rope(k, cos, sin), v))  # (3, N, nh, hs)
        # Pad per sequence: kept tokens stay in order, so a causal mask over the compact
        # index is causal over the original positions, and padding sits after every real key.
        padded = qkv.new_zeros(3, sel.batch * sel.max_count, self.n_heads, self.head_dim)
        padded = padded.index_copy(1, sel.padded_index, qkv)
        q, k, v = padded.unflatten(1, (sel.batch, sel.max_count)).transpose(2, 3).unbind(0)  # (B, nh, K, hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).flatten(0, 1)[sel.padded_index].flatten(1)  # (N, d)


class SwiGLU(nn.Module):
    """w_out(silu(x W_gate) * (x W_up)): 6 d h FLOPs per token (Shazeer 2020)."""

    def __init__(self, cfg: ArchConfig):
        super().__init__()
        self.w_in = nn.Linear(cfg.d_model, 2 * cfg.mlp_hidden, bias=False)  # gate and up, fused
        self.w_out = nn.Linear(cfg.mlp_hidden, cfg.d_model, bias=False)

    def forward(self, x: Tensor, sel: TokenSelection | None = None) -> Tensor:
        gate, up = self.w_in(x).chunk(2, dim=-1)
        return self.w_out(F.silu(gate) * up)
