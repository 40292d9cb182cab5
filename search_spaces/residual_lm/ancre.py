"""`ancre`: learned residual connectivity between blocks (Wang et al. 2026, arXiv 2602.09009).

Let o_0 be the embedding output and o_j the output of block j. Every shortcut i:j (i < j) has a
logit c_ij; the ingoing coefficients p_ij = softmax_i(c_ij / tau), i = 0..j-1, sum to one. Then

    z_j = o_{j-1} + Attn_j(norm(o_{j-1}))
    o_j = sum_{i<j} p_ij o_i + Attn_j(norm(o_{j-1})) + MLP_j(norm(z_j))

which is exactly `cascaded` when p_{j-1,j} = 1. The L(L+1)/2 logits start equal (p_ij = 1/j),
as in the paper; without the softmax normalisation training diverges (paper Table 5).
The mix is one fused op (`ops.ancre_mix`: a Triton kernel on CUDA that never stacks the j
states, the PyTorch reference elsewhere).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .base import ResidualLM
from .cascaded import PreNormBlock, rms_norm
from .common import scaled
from .config import ArchConfig
from .fused import ancre_mix
from .parametrization import logit_multiplier


class AncreConnectivity(nn.Module):
    """The logits c_ij, stored flat: block j's j logits (i = 0..j-1) start at j (j - 1) / 2."""

    def __init__(self, n_layers: int, tau: float):
        super().__init__()
        self.n_layers, self.tau = n_layers, tau
        self.logits = nn.Parameter(torch.zeros(n_layers * (n_layers + 1) // 2))

    def coefficients(self, j: int) -> Tensor:
        """p_ij for i = 0..j-1: (j,)."""
        start = j * (j - 1) // 2
        return torch.softmax(self.logits[start : start + j] / self.tau, dim=0)

    def matrix(self) -> Tensor:
        """P with P[i, j - 1] = p_ij: (L + 1, L), zero where i >= j (as in the paper's Fig. 6)."""
        p = self.logits.new_zeros(self.n_layers + 1, self.n_layers)
        for j in range(1, self.n_layers + 1):
            p[:j, j - 1] = self.coefficients(j)
        return p


class AncreLM(ResidualLM):
    def __init__(self, cfg: ArchConfig):
        super().__init__(cfg)
        self.blocks = nn.ModuleList(PreNormBlock(cfg, j) for j in range(1, cfg.n_layers + 1))
        self.norm = nn.RMSNorm(cfg.d_model, eps=1e-6)
        self.connectivity = AncreConnectivity(cfg.n_layers, cfg.ancre_tau)
        self.logit_multiplier = logit_multiplier(cfg)  # muP's 1/m_d (1 under standard)

    def hidden(self, idx: Tensor) -> Tensor:
        self.begin_forward(idx)
        states = [self.tok_emb(idx)]  # o_0: (B, T, d)
        self.record_residual_rms(states[0])
        for j, block in enumerate(self.blocks, start=1):
            mixed = ancre_mix(self.connectivity.coefficients(j), states)  # sum_i p_ij o_i, fused
            states.append(block(states[-1], base=mixed))
            self.record_residual_rms(states[-1])
        return states[-1]

    def head(self, z: Tensor) -> Tensor:
        return scaled(rms_norm(self.norm, z), self.logit_multiplier) @ self.unembedding.T  # (B, T, V)

    def diagnostics(self) -> dict:
        return {**super().diagnostics(), "ancre_p": self.connectivity.matrix().tolist()}
