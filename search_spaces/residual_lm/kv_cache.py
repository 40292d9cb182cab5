"""Incremental decoding: each attention keeps the keys and values of the positions it executed.

A forward inside `ResidualLM.decoding(cache)` continues the cache's `length` positions (every sequence
alike: padding goes on the right) and extends them. Each attention's `LayerKV` holds, for sequence b, the
keys (RoPE applied at their true positions) and values of the `lengths[b]` positions that attention
executed, in position order, in slots 0..lengths[b]-1 of (B, heads, capacity, hs) buffers:

    dense attention            every position:              lengths[b] = length
    routed attention (MoD)     the positions its router kept: (1 - mod_rate) length in expectation,
                               as many per sequence as that sequence kept (ragged in a batch)

A skipped token writes nothing. Slots keep position order, so causality over slots is causality over
positions: sequence b's new executed tokens take slots lengths[b] + rank (their rank among its new
executed tokens), and a query at slot q attends to the key slots <= q, which are exactly the keys the full
forward's attention over the executed tokens reads (`common.CausalSelfAttention`).

Buffers grow by `chunk` positions at a time, one copy every `chunk` positions instead of one per step as
with concatenation. `nbytes` counts the keys and values of the positions held; `reserved_nbytes` the
buffers, larger by under `chunk` slots per sequence and layer, plus the shorter sequences' padding in a
ragged batch (chunk=1 reserves exactly the longest sequence).

Causal routing (`causal_threshold`, and `predictor` at evaluation) decides a token from its own residual
stream, which depends on earlier tokens only, so the decisions of a cached step equal those of the full
forward. `topk` routing ranks every token of the sequence against the others: a new token changes earlier
decisions, so a cache is impossible (`ArchConfig.eval_is_causal` is False). ANCRe's connectivity mixes
each token's own block outputs (no other token's), so it caches like the baseline; NAG's attention reads
the direction lane u, cached the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = ["CHUNK", "KVCache", "LayerKV"]

CHUNK = 32  # slots a buffer grows by: K and V of 32 positions, 32 KiB per layer and sequence at d 128 in fp32


@dataclass
class LayerKV:
    """One attention's cache. `start` is the position of the first token of the forward in progress."""

    chunk: int = CHUNK
    keys: Tensor | None = None  # (B, heads, capacity, hs)
    values: Tensor | None = None  # (B, heads, capacity, hs)
    lengths: Tensor | None = None  # (B,) long: positions held per sequence
    filled: int = 0  # max_b lengths[b]: the slots attention reads
    ragged: bool = False  # lengths may differ between sequences
    start: int = 0

    def append(self, keys: Tensor, values: Tensor, counts: Tensor | None = None) -> Tensor | int:
        """Store T new rows per sequence, keys and values (B, heads, T, hs), of which sequence b's first
        counts[b] are real (all T when counts is None; the rest is padding, stored past its end and never read).
        Returns the slot of each sequence's first new row: (B,) when lengths may differ, else one int."""
        batch, _, steps, _ = keys.shape
        if self.lengths is None:
            self.lengths = torch.zeros(batch, dtype=torch.long, device=keys.device)
        first: Tensor | int = self.lengths.clone() if self.ragged else self.filled
        self._reserve(keys, self.filled + steps)
        assert self.keys is not None and self.values is not None
        if isinstance(first, int):
            self.keys[:, :, first : first + steps] = keys
            self.values[:, :, first : first + steps] = values
        else:  # per-sequence offsets: rows (B, 1) and slots (B, T) index a (B, T, heads, hs) block
            rows = torch.arange(batch, device=keys.device)[:, None]
            slots = first[:, None] + torch.arange(steps, device=keys.device)
            self.keys[rows, :, slots] = keys.transpose(1, 2)
            self.values[rows, :, slots] = values.transpose(1, 2)
        self.lengths += steps if counts is None else counts
        self.ragged = self.ragged or (counts is not None and batch > 1 and bool((counts != steps).any()))
        self.filled = int(self.lengths.max()) if self.ragged else self.filled + steps
        return first

    def mask(self, first: Tensor | int, steps: int) -> Tensor | None:
        """Which held slots each of the T new rows may read: those <= its own slot, first[b] + row, as
        (B or 1, 1, T, filled) bool. None where that is plain causal attention: one new row per sequence at
        the end of every sequence, or an empty cache (then `is_causal` with T > 1)."""
        if isinstance(first, int) and (first == 0 or steps == 1):
            return None
        assert self.lengths is not None
        slots = torch.arange(self.filled, device=self.lengths.device)
        rows = torch.arange(steps, device=self.lengths.device)
        if isinstance(first, int):
            return (slots <= first + rows[:, None])[None, None]  # (1, 1, T, S)
        return (slots <= (first[:, None] + rows)[:, :, None])[:, None]  # (B, 1, T, S)

    def held(self) -> tuple[Tensor, Tensor]:
        """The filled slots: keys and values (B, heads, filled, hs), views of the buffers."""
        assert self.keys is not None and self.values is not None
        return self.keys[:, :, : self.filled], self.values[:, :, : self.filled]

    @property
    def nbytes(self) -> int:
        """Bytes of the keys and values of the positions held, summed over sequences."""
        if self.keys is None or self.lengths is None:
            return 0
        _, heads, _, head_dim = self.keys.shape
        return 2 * int(self.lengths.sum()) * heads * head_dim * self.keys.element_size()

    @property
    def reserved_nbytes(self) -> int:
        """Bytes of the two buffers."""
        return 0 if self.keys is None or self.values is None else self.keys.nbytes + self.values.nbytes

    def _reserve(self, like: Tensor, slots: int) -> None:
        """Grow both buffers to at least `slots` slots, a multiple of `chunk`, keeping what they hold."""
        capacity = 0 if self.keys is None else self.keys.shape[2]
        if slots <= capacity:
            return
        batch, heads, _, head_dim = like.shape
        size = (batch, heads, math.ceil(slots / self.chunk) * self.chunk, head_dim)
        old_keys, old_values = self.keys, self.values
        self.keys, self.values = like.new_zeros(size), like.new_zeros(size)  # zeros: padding rows read finite
        if old_keys is not None and old_values is not None:
            self.keys[:, :, :capacity], self.values[:, :, :capacity] = old_keys, old_values


@dataclass
class KVCache:
    """The caches of a model's attentions, in module order; `length` positions seen, every sequence alike."""

    chunk: int = CHUNK
    layers: list[LayerKV] = field(default_factory=list)
    length: int = 0

    def layer(self, i: int) -> LayerKV:
        while len(self.layers) <= i:
            self.layers.append(LayerKV(chunk=self.chunk))
        return self.layers[i]

    def begin(self, steps: int, limit: int) -> None:
        """Start a forward of `steps` new positions (every layer's `start` is the first); ValueError if the
        last would be past `limit`, the model's seq_len."""
        if self.length + steps > limit:
            raise ValueError(f"decoding: position {self.length + steps} is past the model's seq_len {limit}")
        for layer in self.layers:
            layer.start = self.length
        self.length += steps

    def get_seq_length(self) -> int:
        """`length`, under the name Hugging Face's generation loop asks for."""
        return self.length

    @property
    def nbytes(self) -> int:
        """Bytes of the keys and values held, every layer and sequence (`LayerKV.nbytes`)."""
        return sum(layer.nbytes for layer in self.layers)

    @property
    def reserved_nbytes(self) -> int:
        """Bytes of every layer's buffers (`LayerKV.reserved_nbytes`)."""
        return sum(layer.reserved_nbytes for layer in self.layers)
