"""`nag`: the norm-agnostic residual (Figliolia & Millidge 2026, arXiv 2606.16112).

The stream is a unit-RMS direction u (||u|| = sqrt d) and a log-norm lane s; x = exp(s) u.

    encode     e = emb(token) - mean,  u_0 = sqrt(d) e / ||e||,  s_0 = log(||e|| / sqrt d) + g
    sublayer l reads u (no pre-norm); its output f is mean-centred and orthogonalised:
               f_perp = f - (<f, u> / d) u,   v = sqrt(d) f_perp / ||f_perp||
    gate       m = (sum_c softmax(w)_c sigmoid(w_c . u + b_c))^beta,  beta = softplus(.) > 0
    update     tan(theta) = alpha_l m,  u' = cos(theta) u + sin(theta) v,  s' = s + log1p((alpha_l m)^2) / 2
    output     logits = (W_hat u / d) exp(s),  W_hat = unembedding rows at unit RMS

The gate and the rotation are the plain functions of `nag_math` (`nag_gate`, `rotate`); a sublayer
runs them as one fused op (`ops.nag_epilogue`) whose reference they are. alpha_l starts at l^-0.5
(l = 1..2L counts sublayers); under `completep` the rotation uses c_L alpha_l
(`parametrization.nag_rotation_multiplier`: the total initial rotation does not grow with depth).
The update's relative size is alpha m whatever ||x|| is, and scaling e by c > 0 changes only s
(by log c): the tests check both.
Under Mixture-of-Depths the score is the rotation the sublayer would apply, |alpha m|, known
before the sublayer runs; a skipped token keeps (u, s). With `mod_granularity="block"` the block
decides once, by its attention sublayer's rotation, and a kept token runs both sublayers (gathered
once, scattered back once).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import ResidualLM, make_router
from .common import CausalSelfAttention, SwiGLU, scaled
from .config import ArchConfig
from .fused import nag_epilogue
from .nag_math import NORM_EPS, nag_gate
from .parametrization import nag_rotation_multiplier
from .routing import DepthRouter, TokenSelection, gather_tokens


class NagGate(nn.Module):
    """m(u) = (sum_c p_c sigmoid(w_c . u + b_c))^beta in [0, 1]: 2 C d FLOPs per token."""

    def __init__(self, d_model: int, components: int):
        super().__init__()
        self.pre = nn.Linear(d_model, components)
        self.mix_logits = nn.Parameter(torch.zeros(components))
        self.beta_raw = nn.Parameter(torch.tensor(math.log(math.e - 1.0)))  # softplus -> beta = 1

    def shape_params(self) -> tuple[Tensor, Tensor]:
        """(p, beta) = (softmax(mix_logits), softplus(beta_raw))."""
        return torch.softmax(self.mix_logits, 0), F.softplus(self.beta_raw)

    def forward(self, u: Tensor) -> Tensor:
        return nag_gate(self.pre(u), *self.shape_params())  # (...,)


class NagSublayer(nn.Module):
    """One NAG sublayer: its gate, its alpha_l, its (optional) router, around attention or MLP.

    The gate, rotation and log-norm update after the inner sublayer are one fused op
    (`ops.nag_epilogue`: a Triton kernel on CUDA, the PyTorch reference elsewhere).
    """

    def __init__(self, cfg: ArchConfig, inner: nn.Module, position: int, block: int):
        super().__init__()
        self.inner = inner
        self.gate = NagGate(cfg.d_model, cfg.nag_gate_components)
        self.alpha = nn.Parameter(torch.tensor(position**-0.5))  # l^-0.5, l = 1..2L
        self.rotation_multiplier = nag_rotation_multiplier(cfg)  # c_L (1 under standard)
        self.router = make_router(cfg, block, linear=False)
        self.recording = False
        self.last_angle: Tensor | None = None
        self.last_gate: Tensor | None = None

    def forward(self, u: Tensor, s: Tensor) -> tuple[Tensor, Tensor]:
        pre = self.gate.pre(u)  # (B, T, C): the gate's matmul; the rest of the gate is fused
        if self.router is None:
            self.record(pre, None)
            return self.update(u, s, pre)
        sel = self.router.route(self.rotation(pre), u)  # None: every token executes
        self.record(pre, sel)
        if sel is not None and sel.skip_all:
            return u, s  # every token skips: both lanes unchanged, nothing runs
        u_sel, s_sel, pre_sel = (gather_tokens(t, sel) for t in (u, s, pre))  # (N, d), (N,), (N, C)
        return scatter_stream(u, s, sel, *self.update(u_sel, s_sel, pre_sel, sel))

    @torch.no_grad()
    def rotation(self, pre: Tensor) -> Tensor:
        """|alpha m|: the rotation this sublayer would apply, known before it runs (the MoD score)."""
        return (self.scaled_alpha() * nag_gate(pre, *self.gate.shape_params())).abs()

    def update(self, u: Tensor, s: Tensor, pre: Tensor, sel: TokenSelection | None = None) -> tuple[Tensor, Tensor]:
        """(u', s') of the tokens given: all of them (B, T, ...), or the executed ones (N, ...) of `sel`."""
        return nag_epilogue(u, self.inner(u, sel), s, pre, *self.gate.shape_params(), self.scaled_alpha())

    def scaled_alpha(self) -> Tensor:
        """The alpha the rotation uses: c_L alpha_l."""
        return scaled(self.alpha, self.rotation_multiplier)

    def record(self, pre: Tensor, sel: TokenSelection | None) -> None:
        """Mean gate over all tokens and mean rotation angle over the executed ones (`sel`'s; all for None)."""
        if not self.recording:  # every forward asks: answer before entering no_grad
            return
        with torch.no_grad():
            p, beta = self.gate.shape_params()
            gate = nag_gate(pre.float(), p, beta)
            executed = gate if sel is None else gather_tokens(gate, sel)
            self.last_gate = gate.mean()
            self.last_angle = torch.atan((self.scaled_alpha() * executed).abs()).mean()


def scatter_stream(
    u: Tensor, s: Tensor, sel: TokenSelection | None, u_next: Tensor, s_next: Tensor
) -> tuple[Tensor, Tensor]:
    """(u, s) with the executed tokens' rows replaced by (u_next, s_next); skipped tokens keep theirs.
    With sel None every token executed: (u_next, s_next)."""
    if sel is None:
        return u_next, s_next
    u = u.flatten(0, 1).index_copy(0, sel.index, u_next).view_as(u)
    return u, s.flatten().index_copy(0, sel.index, s_next).view_as(s)


class NagBlock(nn.Module):
    def __init__(self, cfg: ArchConfig, index: int):
        super().__init__()
        self.attn = NagSublayer(cfg, CausalSelfAttention(cfg), 2 * index - 1, index)
        self.mlp = NagSublayer(cfg, SwiGLU(cfg), 2 * index, index)
        self.block_router = make_router(cfg, index, linear=False, granularity="block")

    @property
    def attn_router(self) -> DepthRouter | None:
        return self.attn.router

    @property
    def mlp_router(self) -> DepthRouter | None:
        return self.mlp.router

    def forward(self, u: Tensor, s: Tensor) -> tuple[Tensor, Tensor]:
        if self.block_router is None:
            return self.mlp(*self.attn(u, s))
        pre = self.attn.gate.pre(u)
        sel = self.block_router.route(self.attn.rotation(pre), u)  # one decision for the block; None: all
        self.attn.record(pre, sel)
        if sel is not None and sel.skip_all:
            return u, s  # every token skips: both lanes unchanged, nothing runs
        u_sel, s_sel, pre_sel = (gather_tokens(t, sel) for t in (u, s, pre))
        u_sel, s_sel = self.mlp(*self.attn.update(u_sel, s_sel, pre_sel, sel))  # the MLP: dense on (N, d)
        return scatter_stream(u, s, sel, u_sel, s_sel)


class NagLM(ResidualLM):
    def __init__(self, cfg: ArchConfig):
        super().__init__(cfg)
        self.blocks = nn.ModuleList(NagBlock(cfg, j) for j in range(1, cfg.n_layers + 1))
        self.g_encode = nn.Parameter(torch.zeros(()))

    def init_weights(self) -> None:
        super().init_weights()
        nn.init.normal_(self.tok_emb.weight, 0.0, 1.0)  # unit RMS: s_0 starts near g_encode = 0

    def encode(self, idx: Tensor) -> tuple[Tensor, Tensor]:
        """(u_0, s_0) from the mean-centred embedding rows."""
        e = self.tok_emb(idx)
        e = e - e.mean(-1, keepdim=True)
        rms = e.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(NORM_EPS)  # ||e|| / sqrt(d)
        return e / rms, rms.squeeze(-1).log() + self.g_encode

    def stream(self, idx: Tensor) -> tuple[Tensor, Tensor]:
        """The final (u, s): direction (B, T, d) and log-norm (B, T) lanes."""
        self.begin_forward(idx)
        u, s = self.encode(idx)
        self.record_residual_rms(s, log_norm=True)  # RMS of x = exp(s) u
        for block in self.blocks:
            u, s = block(u, s)
            self.record_residual_rms(s, log_norm=True)
        return u, s

    def hidden(self, idx: Tensor) -> Tensor:
        """The residual stream x = exp(s) u: (B, T, d)."""
        u, s = self.stream(idx)
        return u * s.exp().unsqueeze(-1)

    def head(self, z: Tensor) -> Tensor:
        """logits = (W_hat u / d) exp(s) = W_hat z / d, with W_hat's rows at unit RMS."""
        w = self.unembedding
        w_hat = w * torch.rsqrt(w.pow(2).mean(-1, keepdim=True).clamp_min(NORM_EPS**2))
        return z @ (w_hat.T / self.cfg.d_model)  # (B, T, V)

    def diagnostics(self) -> dict:
        blocks = cast("Iterable[NagBlock]", self.blocks)
        subs = [sub for block in blocks for sub in (block.attn, block.mlp)]
        return {
            **super().diagnostics(),
            "nag_angle": [None if s.last_angle is None else float(s.last_angle) for s in subs],
            "nag_gate": [None if s.last_gate is None else float(s.last_gate) for s in subs],
            "nag_alpha": [float(s.scaled_alpha().detach()) for s in subs],  # c_L alpha_l, as the rotation uses it
        }
