"""`cascaded`: the pre-norm baseline, and the block it shares with ANCRe.

    z  = x + Attn(norm(x))
    x' = z + MLP(norm(z))

On a routed block each sublayer only runs on the tokens its `LinearRouter` keeps; a skipped
token gets nothing added (the identity), a kept one gets sigmoid(r) * sublayer(.) (Raposo et al.).
With `mod_granularity="block"` one router decides for the whole block (the MoD paper's form):
r = w . norm(x), and a kept token runs both sublayers, x' = x + sigmoid(r) (a + m) with
a = Attn(norm(x)) over the kept tokens and m = MLP(norm(x + a)); a skipped one passes unchanged.
The kept tokens are gathered once and scattered back once per block. A router scores from x itself
(`LinearRouter.score`: (w * g) . x / rms(x), never forming norm(x)), and only the kept tokens are normalised.

In a dense block the add that makes z and the MLP's norm of z are one fused op (`ops.add_rmsnorm`: a
Triton kernel on CUDA, the PyTorch reference elsewhere); so is every other RMSNorm here.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .base import ResidualLM, make_router
from .common import CausalSelfAttention, SwiGLU, scaled
from .config import ArchConfig
from .fused import add_rmsnorm
from .parametrization import branch_multiplier, logit_multiplier
from .routing import Delta, LinearRouter, gather_tokens


def rms_norm(norm: nn.RMSNorm, x: Tensor) -> Tensor:
    """norm(x), through the fused op."""
    assert norm.eps is not None  # every norm here is built with eps=1e-6
    return add_rmsnorm(x, None, norm.weight, norm.eps)[1]


def add_then_norm(x: Tensor, delta: Delta, norm: nn.RMSNorm) -> tuple[Tensor, Tensor]:
    """(z, norm(z)) with z = x + delta: one fused pass when delta is dense."""
    if delta.sel is None:
        assert norm.eps is not None  # every norm here is built with eps=1e-6
        return add_rmsnorm(x, delta.values, norm.weight, norm.eps)
    z = delta.added_to(x)
    return z, rms_norm(norm, z)


def predictor_input(router: LinearRouter, norm: nn.RMSNorm, x: Tensor) -> Tensor | None:
    """norm(x) of every token where the router has a predictor (`mod_routing="predictor"` reads it), else None."""
    return None if router.predictor is None else rms_norm(norm, x)


def run_prenorm_sublayer(sublayer: nn.Module, router: LinearRouter, norm: nn.RMSNorm, x: Tensor) -> Delta:
    """sublayer(norm(x)) on the tokens the router keeps, scaled by sigmoid(score); only they are normalised."""
    score = router.score(x, norm)  # (B, T)
    sel = router.route(score, predictor_input(router, norm, x))  # None: every token executes
    if sel is not None and sel.skip_all:
        return Delta(None)  # every token skips: nothing runs
    gate = torch.sigmoid(gather_tokens(score, sel)).unsqueeze(-1)  # (N, 1) or (B, T, 1)
    return Delta(sublayer(rms_norm(norm, gather_tokens(x, sel)), sel) * gate, sel)


class PreNormBlock(nn.Module):
    """Attention then SwiGLU, each behind an RMSNorm. Returns base + a + m, where m reads x + a."""

    def __init__(self, cfg: ArchConfig, index: int):
        super().__init__()
        self.attn_norm = nn.RMSNorm(cfg.d_model, eps=1e-6)
        self.attn = CausalSelfAttention(cfg, branch_multiplier(cfg))  # f(x) / m_L under completep
        self.mlp_norm = nn.RMSNorm(cfg.d_model, eps=1e-6)
        self.mlp = SwiGLU(cfg, branch_multiplier(cfg))
        self.attn_router = make_router(cfg, index, linear=True)
        self.mlp_router = make_router(cfg, index, linear=True)
        self.block_router = make_router(cfg, index, linear=True, granularity="block")

    def forward(self, x: Tensor, base: Tensor | None = None) -> Tensor:
        if self.block_router is not None:
            return self._routed_block(x, base)
        if self.attn_router is None:  # a dense block (a routed one routes both sublayers)
            a = Delta(self.attn(rms_norm(self.attn_norm, x)))
            z, h = add_then_norm(x, a, self.mlp_norm)  # z = x + a: (B, T, d), h = norm(z)
            m = Delta(self.mlp(h))
        else:
            assert self.mlp_router is not None
            a = run_prenorm_sublayer(self.attn, self.attn_router, self.attn_norm, x)
            z = a.added_to(x)
            m = run_prenorm_sublayer(self.mlp, self.mlp_router, self.mlp_norm, z)
        return m.added_to(z if base is None else a.added_to(base))

    def _routed_block(self, x: Tensor, base: Tensor | None) -> Tensor:
        """One decision per token for the whole block: the kept tokens run both sublayers, gathered once."""
        router, norm = self.block_router, self.attn_norm
        assert router is not None
        score = router.score(x, norm)  # (B, T)
        sel = router.route(score, predictor_input(router, norm, x))  # None: all
        if sel is not None and sel.skip_all:
            return x if base is None else base  # every token skips: nothing runs
        x_sel = gather_tokens(x, sel)  # (N, d) or (B, T, d)
        a = self.attn(rms_norm(norm, x_sel), sel)  # only the kept tokens are normalised
        _, h_mlp = add_then_norm(x_sel, Delta(a), self.mlp_norm)  # norm(x + a), on the kept tokens only
        gate = torch.sigmoid(gather_tokens(score, sel)).unsqueeze(-1)  # (N, 1) or (B, T, 1)
        return Delta((a + self.mlp(h_mlp)) * gate, sel).added_to(x if base is None else base)


class CascadedLM(ResidualLM):
    def __init__(self, cfg: ArchConfig):
        super().__init__(cfg)
        self.blocks = nn.ModuleList(PreNormBlock(cfg, j) for j in range(1, cfg.n_layers + 1))
        self.norm = nn.RMSNorm(cfg.d_model, eps=1e-6)
        self.logit_multiplier = logit_multiplier(cfg)  # muP's 1/m_d (1 under standard)

    def hidden(self, idx: Tensor) -> Tensor:
        self.begin_forward(idx)
        x = self.tok_emb(idx)  # (B, T, d)
        self.record_residual_rms(x)
        for block in self.blocks:
            x = block(x)
            self.record_residual_rms(x)
        return x

    def head(self, z: Tensor) -> Tensor:
        return scaled(rms_norm(self.norm, z), self.logit_multiplier) @ self.unembedding.T  # (B, T, V)
