"""What every residual family's language model shares: embeddings, init, executed FLOPs, diagnostics.

A family subclasses `ResidualLM`, builds its blocks, and implements `hidden(idx) -> z` (the
final block output, before any final norm), `head(z) -> logits` and `routers()`;
`forward(idx) = head(hidden(idx))`. A constructor only builds: `build_model` records the
parameters' growth with width (`width_growth`) and then calls `init_weights`.
Diagnostics are recorded only inside `with model.recording_diagnostics():`, so training steps
pay nothing for them; executed FLOPs are always known after a forward.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Literal, overload

from torch import Tensor, nn

from .common import CausalSelfAttention
from .config import ArchConfig
from .flops import SublayerKey, forward_flops
from .kv_cache import KVCache
from .parametrization import INIT_STD, TensorGrowth, init_std, tensor_rules
from .routing import DepthRouter, LinearRouter

__all__ = ["INIT_STD", "ResidualLM", "make_router"]


class ResidualLM(nn.Module):
    """Token embedding -> L blocks -> unembedding. Subclasses define the residual stream."""

    blocks: nn.ModuleList  # built by each family; every block exposes attn_router and mlp_router

    def __init__(self, cfg: ArchConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.width_growth: dict[str, TensorGrowth] = {}  # per parameter; recorded by build_model
        self.recording = False
        self.last_residual_rms: list[Tensor] = []
        self._last_shape: tuple[int, int] = (0, 0)
        self.kv_cache: KVCache | None = None  # set by `decoding`

    @property
    def unembedding(self) -> Tensor:
        """(V, d) unembedding matrix: the embedding itself when tied."""
        return self.tok_emb.weight if self.lm_head is None else self.lm_head.weight

    def init_weights(self) -> None:
        """Every matrix from N(0, std^2): GPT-2's N(0, 0.02), the sublayers' output projections at
        0.02 / sqrt(2L), under `standard`; under `completep` those stds at the base depth L_0, times
        the tensor's width rule (`parametrization.init_std`). Needs `width_growth`; a family that
        starts a tensor differently extends this."""
        rules = tensor_rules(self)  # init_scale 1 under standard
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, init_std(self.cfg, name, rules[name]))

    def routers(self) -> dict[SublayerKey, DepthRouter]:
        """The routers of the routed sublayers, keyed by ("attn" | "mlp", 1-based block).

        Every family's blocks expose `attn_router` and `mlp_router` (None where not routed) and
        `block_router` (None unless the block is routed as a whole; then it decides for both of
        its sublayers and appears under both keys: their executed tokens are the same).
        """
        found: dict[SublayerKey, DepthRouter] = {}
        block: Any  # each family's own block class
        for j, block in enumerate(self.blocks, start=1):
            shared = block.block_router
            for kind, router in (("attn", shared or block.attn_router), ("mlp", shared or block.mlp_router)):
                if router is not None:
                    found[(kind, j)] = router
        return found

    def auxiliary_loss(self) -> Tensor | None:
        """The MoD predictors' cross-entropy of the last training forward (summed; None without one), for the
        trainer to add to the language-model loss. It reaches only the predictors (stop-gradient inputs)."""
        losses = {id(r): r.aux_loss for r in self.routers().values() if r.aux_loss is not None}
        return sum(losses.values()) if losses else None  # type: ignore[return-value]

    def hidden(self, idx: Tensor) -> Tensor:
        """The residual stream after the last block, z: (B, T, d) (the width probe's z)."""
        raise NotImplementedError

    def head(self, z: Tensor) -> Tensor:
        """Logits (B, T, V) from the final residual stream z."""
        raise NotImplementedError

    def forward(self, idx: Tensor) -> Tensor:
        return self.head(self.hidden(idx))

    @contextlib.contextmanager
    def decoding(self, cache: KVCache) -> Iterator[None]:
        """Inside this block every forward continues the positions in `cache` and extends it: the logits
        of `forward(next_tokens)` are those the full forward gives at those positions (`kv_cache`).
        Needs evaluation mode (training moves the routers' thresholds) and causal routing."""
        if self.training:
            raise ValueError("decoding: call model.eval() first (training moves the routers' thresholds)")
        if not self.cfg.eval_is_causal:
            raise ValueError("decoding: mod_routing='topk' is not causal, so it cannot decode with a cache")
        attentions = [m for m in self.modules() if isinstance(m, CausalSelfAttention)]
        for i, attention in enumerate(attentions):
            attention.kv = cache.layer(i)
        self.kv_cache = cache
        try:
            yield
        finally:
            for attention in attentions:
                attention.kv = None
            self.kv_cache = None

    def begin_forward(self, idx: Tensor) -> None:
        if idx.dim() != 2 or idx.shape[1] > self.cfg.seq_len:
            raise ValueError(f"idx: expected (B, T) with T <= seq_len={self.cfg.seq_len}, got {tuple(idx.shape)}")
        self._last_shape = (idx.shape[0], idx.shape[1])
        self.last_residual_rms = []
        if self.kv_cache is not None:
            self.kv_cache.begin(idx.shape[1], self.cfg.seq_len)  # the new tokens continue its positions

    def record_residual_rms(self, stream: Tensor, log_norm: bool = False) -> None:
        """Append the mean over tokens of the residual stream's per-token RMS (one entry per depth).

        `stream` is x: (B, T, d), or for NAG the log-norm lane s: (B, T), where RMS(x) = exp(s).
        """
        if self.recording:
            stream = stream.detach().float()
            rms = stream.exp() if log_norm else stream.pow(2).mean(-1).sqrt()
            self.last_residual_rms.append(rms.mean())

    def last_executed_flops(self) -> dict[str, float]:
        """Forward FLOPs the last forward pass executed, by component, summed over its batch."""
        batch, seq_len = self._last_shape
        counts = {key: r.last_counts for key, r in self.routers().items() if r.last_counts is not None}
        return {k: float(v) for k, v in forward_flops(self.cfg, seq_len, counts, batch).items()}

    def last_executed_flops_per_token(self) -> float:
        batch, seq_len = self._last_shape
        return sum(self.last_executed_flops().values()) / (batch * seq_len)

    @contextlib.contextmanager
    def recording_diagnostics(self) -> Iterator[None]:
        """Record per-layer diagnostics during the forward passes inside this block."""
        modules: list[Any] = [m for m in self.modules() if hasattr(m, "recording")]
        for m in modules:
            m.recording = True
        try:
            yield
        finally:
            for m in modules:
                m.recording = False

    def diagnostics(self) -> dict:
        """Plain-Python diagnostics of the last forward pass (recorded ones only where recording)."""
        routers = self.routers()
        return {
            "residual_rms": [float(x) for x in self.last_residual_rms],
            "skip_rate": {
                f"{k}{j}": float(r.last_skip_rate) for (k, j), r in routers.items() if r.last_skip_rate is not None
            },
            "mod_threshold": {f"{k}{j}": float(r.eval_threshold) for (k, j), r in routers.items()},  # exported
            "mod_threshold_train": {f"{k}{j}": float(r.threshold) for (k, j), r in routers.items()},
            "executed_flops_per_token": self.last_executed_flops_per_token() if self._last_shape[0] else None,
        }


@overload
def make_router(cfg: ArchConfig, block: int, linear: Literal[True], granularity: str = ...) -> LinearRouter | None: ...
@overload
def make_router(cfg: ArchConfig, block: int, linear: Literal[False], granularity: str = ...) -> DepthRouter | None: ...
def make_router(cfg: ArchConfig, block: int, linear: bool, granularity: str = "sublayer") -> DepthRouter | None:
    """The router for a sublayer of block `block` (1-based), or, with `granularity="block"`, for the
    whole block; None if that block is dense or routed at the other granularity."""
    if block not in cfg.routed_blocks or granularity != cfg.mod_granularity:
        return None
    if linear:
        return LinearRouter(cfg.d_model, cfg.mod_rate, cfg.mod_routing)
    return DepthRouter(cfg.mod_rate, cfg.mod_routing, cfg.d_model)
