"""Incremental decoding: each attention keeps the keys and values of the positions it has seen.

Every position is appended to every attention's cache, executed or not. A routed attention
(Mixture-of-Depths) marks the positions it skipped as invalid keys, so a new query attends exactly
to the earlier tokens that sublayer executed, the keys the full forward gathers, at their original
RoPE positions. With one mask per cache, each decoding step is

    keys <- [keys; k_new],  valid <- [valid; executed_new]
    attend(q_new, keys)  where key position <= query position and valid

Causal routing (`causal_threshold`, and `predictor` at evaluation) decides a token from its own
residual stream, which depends on earlier tokens only, so the decisions of a cached step equal those
of the full forward. `topk` routing ranks every token of the sequence against the others: a new token
changes earlier decisions, so a cache is impossible (`ArchConfig.eval_is_causal` is False).
ANCRe's connectivity mixes each token's own block outputs (no other token's), so it caches like the
baseline; NAG's attention reads the direction lane u, cached the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = ["KVCache", "LayerKV"]


@dataclass
class LayerKV:
    """One attention's cache: keys and values (B, heads, S, head_dim) and which of the S are valid keys."""

    keys: Tensor | None = None
    values: Tensor | None = None
    valid: Tensor | None = None  # (B, S) bool

    @property
    def length(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]

    def append(self, keys: Tensor, values: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Add T positions (keys, values (B, heads, T, hs); valid (B, T)); return the whole cache."""
        if self.keys is None or self.values is None or self.valid is None:
            self.keys, self.values, self.valid = keys, values, valid
        else:
            self.keys = torch.cat([self.keys, keys], dim=2)
            self.values = torch.cat([self.values, values], dim=2)
            self.valid = torch.cat([self.valid, valid], dim=1)
        return self.keys, self.values, self.valid


@dataclass
class KVCache:
    """The caches of a model's attentions, in module order; `length` positions seen so far."""

    layers: list[LayerKV] = field(default_factory=list)

    def layer(self, i: int) -> LayerKV:
        while len(self.layers) <= i:
            self.layers.append(LayerKV())
        return self.layers[i]

    @property
    def length(self) -> int:
        return self.layers[0].length if self.layers else 0

    def get_seq_length(self) -> int:
        """`length`, under the name Hugging Face's generation loop asks for."""
        return self.length
