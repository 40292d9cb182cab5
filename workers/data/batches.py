"""Batches from a tokenised corpus: the resumable shuffled training stream, the fixed validation windows,
and bits per byte.

A stream is packed into non-overlapping windows of seq_len + 1 tokens starting seq_len apart, so each
token (but the first) is a target exactly once per epoch.
"""

from __future__ import annotations

import hashlib
import logging
import math
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .corpus import TokenizedCorpus

logger = logging.getLogger(__name__)


def _windows(tokens: torch.Tensor, seq_len: int) -> torch.Tensor:
    """View of the non-overlapping (seq_len + 1)-token windows of a 1-D stream, starting seq_len apart."""
    if tokens.dim() != 1:
        raise ValueError(f"expected a 1-D token stream, got shape {tuple(tokens.shape)}")
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    if tokens.numel() < seq_len + 1:
        return tokens.new_empty((0, seq_len + 1))
    return tokens.unfold(0, seq_len + 1, seq_len)


def _split_window_batch(windows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) int64 tensors: each window without its last / first token."""
    w = windows.long()
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


class TrainBatches:
    """Endless, resumable stream of shuffled training batches ``(x, y)``, shape (batch_size, seq_len).

    The stream is packed into ``(len - 1) // seq_len`` windows of seq_len + 1 tokens starting
    seq_len apart, so each token (but the first) is a target exactly once per epoch.  Epoch
    e visits the windows in the order ``randperm`` of a generator seeded from (seed, e);
    batches take consecutive windows of that endless visiting order (a batch may straddle
    two epochs when the window count is not a multiple of batch_size).  ``state_dict()``
    is (epoch, position) of the next window, so a resumed run yields the same batches.
    """

    def __init__(self, tokens: torch.Tensor, seq_len: int, batch_size: int, seed: int = 0) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.windows = _windows(tokens, seq_len)
        self.n_windows = int(self.windows.shape[0])
        if self.n_windows < batch_size:
            raise ValueError(
                f"train stream of {tokens.numel()} tokens holds {self.n_windows} windows of "
                f"seq_len + 1 = {seq_len + 1} tokens, fewer than batch_size = {batch_size}"
            )
        self.seq_len, self.batch_size, self.seed = seq_len, batch_size, seed
        self.epoch, self.position = 0, 0
        self._order_epoch, self._order = -1, torch.empty(0, dtype=torch.long)

    def epoch_order(self, epoch: int) -> torch.Tensor:
        """The window indices in the order epoch ``epoch`` visits them (a permutation)."""
        if epoch != self._order_epoch:
            blob = f"{self.seed}/{epoch}".encode()
            seed = int.from_bytes(hashlib.blake2b(blob, digest_size=8).digest(), "big") >> 1
            gen = torch.Generator().manual_seed(seed)
            self._order, self._order_epoch = torch.randperm(self.n_windows, generator=gen), epoch
        return self._order

    def _take(self, n: int) -> torch.Tensor:
        """The next ``n`` window indices, advancing (epoch, position)."""
        parts = []
        while n > 0:
            k = min(n, self.n_windows - self.position)
            parts.append(self.epoch_order(self.epoch)[self.position : self.position + k])
            self.position += k
            n -= k
            if self.position == self.n_windows:
                self.epoch, self.position = self.epoch + 1, 0
        return torch.cat(parts)

    def __iter__(self) -> TrainBatches:
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        return _split_window_batch(self.windows[self._take(self.batch_size)])

    def state_dict(self) -> dict[str, int]:
        """Position of the stream (plus the settings it is only valid for)."""
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "seq_len": self.seq_len,
            "batch_size": self.batch_size,
            "n_windows": self.n_windows,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume at ``state`` (from ``state_dict``); ValueError if it was made for other settings."""
        for key in ("seed", "seq_len", "batch_size", "n_windows"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(f"TrainBatches state has {key}={state[key]}, this stream has {getattr(self, key)}")
        if not 0 <= state["position"] < self.n_windows or state["epoch"] < 0:
            raise ValueError(f"TrainBatches state out of range: {state}")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


def _validation_starts(n_tokens: int, seq_len: int, n_sequences: int) -> torch.Tensor:
    """Start offsets of the held-out windows (see `validation_batches`)."""
    if n_sequences < 1:
        raise ValueError(f"n_sequences must be >= 1, got {n_sequences}")
    total = max((n_tokens - 1) // seq_len, 0)
    if total > n_sequences:
        return torch.arange(n_sequences) * (total - 1) // max(n_sequences - 1, 1) * seq_len
    return torch.arange(total) * seq_len


def validation_batches(
    tokens: torch.Tensor, seq_len: int, n_sequences: int, batch_size: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A fixed held-out set: ``n_sequences`` windows spread evenly over the validation stream.

    Windows are non-overlapping (seq_len + 1 tokens, seq_len apart, as in TrainBatches); window
    k = 0..n-1 is the floor(k (W - 1) / (n - 1))-th of the stream's W, so the set samples every
    part of the held-out text (the first n windows would be one or two documents, whose loss
    and seed-to-seed gaps are not the whole set's).  All W are used when the stream is
    short.  Batches of ``batch_size`` (the last may be smaller), ``(x, y)`` int64, in stream
    order.  ValueError if not even one window fits.
    """
    if batch_size < 1:
        raise ValueError(f"n_sequences and batch_size must be >= 1, got {n_sequences}, {batch_size}")
    windows = _windows(tokens, seq_len)
    windows = windows[_validation_starts(tokens.numel(), seq_len, n_sequences) // seq_len]
    if windows.shape[0] == 0:
        raise ValueError(
            f"validation stream of {tokens.numel()} tokens is shorter than one window "
            f"of seq_len + 1 = {seq_len + 1} tokens"
        )
    if windows.shape[0] < n_sequences:
        logger.warning("validation stream holds only %d of %d requested sequences", windows.shape[0], n_sequences)
    return [_split_window_batch(windows[i : i + batch_size]) for i in range(0, windows.shape[0], batch_size)]


def validation_tokens_per_byte(corpus: TokenizedCorpus, seq_len: int, n_sequences: int) -> float:
    """Target tokens per byte of text in the held-out set of `validation_batches`: exact, from the
    bytes each target token covers (1.0 for the byte tokeniser)."""
    starts = _validation_starts(corpus.val.numel(), seq_len, n_sequences)
    if corpus.val_bytes is None or starts.numel() == 0:
        return 1.0
    n_bytes = sum(int(corpus.val_bytes[s + 1 : s + seq_len + 1].sum(dtype=torch.int64)) for s in starts.tolist())
    return starts.numel() * seq_len / n_bytes


def bits_per_byte(nats_per_token: float, tokens_per_byte: float = 1.0) -> float:
    """Bits per byte from a mean cross-entropy in nats per token: nats/token x tokens/byte / ln 2."""
    return nats_per_token * tokens_per_byte / math.log(2)
