"""`ancre`: learned residual connectivity between blocks (Wang et al. 2026, arXiv 2602.09009).

Let o_0 be the embedding output and o_j the output of block j. Every shortcut i:j (i < j) has a
logit c_ij; the ingoing coefficients p_ij = softmax_i(c_ij / tau), i = 0..j-1, sum to one. Then

    z_j = o_{j-1} + Attn_j(norm(o_{j-1}))
    o_j = sum_{i<j} p_ij o_i + Attn_j(norm(o_{j-1})) + MLP_j(norm(z_j))

which is exactly `cascaded` when p_{j-1,j} = 1. The L(L+1)/2 logits start equal (p_ij = 1/j),
as in the paper; without the softmax normalisation training diverges (paper Table 5).
The mixes are one fused op (`ops.ancre_mixes`: on CUDA a Triton kernel per block that never stacks
the j states, elsewhere running sums that take each o_i into every later block's mix in one call).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import ResidualLM
from .cascaded import PreNormBlock, rms_norm
from .common import scaled
from .config import ArchConfig
from .fused import ancre_mixes
from .parametrization import logit_multiplier


class AncreConnectivity(nn.Module):
    """The logits c_ij, stored flat: block j's j logits (i = 0..j-1) start at j (j - 1) / 2."""

    def __init__(self, n_layers: int, tau: float):
        super().__init__()
        self.n_layers, self.tau = n_layers, tau
        self.logits = nn.Parameter(torch.zeros(n_layers * (n_layers + 1) // 2))
        self.kept: tuple[Tensor, Tensor] | None = None  # (the logits, p) without autograd: p of those logits

    def ingoing(self) -> Tensor:
        """p_ij for i = 0..L-1 and every block j at once: (L, L) with [i, j - 1] = p_ij, zero where i >= j. One
        softmax: block j's row of logits holds its j logits and -inf (p = 0) for the states it cannot read.
        Without autograd (evaluation, decoding) p is kept until the logits change (compared by value: an optimiser
        may write them in place without bumping their version): a one-token decode step would otherwise spend about
        20 us of its 1 ms at d 128 computing it again."""
        if torch.is_grad_enabled():
            return self._softmax()
        logits, kept = self.logits, self.kept
        if (
            kept is None
            or kept[0].device != logits.device
            or kept[0].dtype != logits.dtype
            or not torch.equal(kept[0], logits)
        ):
            kept = self.kept = (logits.detach().clone(), self._softmax())
        return kept[1]

    def _softmax(self) -> Tensor:
        n = self.n_layers
        slots = torch.tril_indices(n, n, device=self.logits.device)  # (block j - 1, i): the logits' order
        c = self.logits.new_full((n, n), float("-inf")).index_put(tuple(slots), self.logits / self.tau)
        return torch.softmax(c, dim=1).T

    def matrix(self) -> Tensor:
        """P with P[i, j - 1] = p_ij: (L + 1, L), zero where i >= j (as in the paper's Fig. 6)."""
        return F.pad(self.ingoing(), (0, 0, 0, 1))  # state i = L feeds no block


class AncreLM(ResidualLM):
    def __init__(self, cfg: ArchConfig):
        super().__init__(cfg)
        self.blocks = nn.ModuleList(PreNormBlock(cfg, j) for j in range(1, cfg.n_layers + 1))
        self.norm = nn.RMSNorm(cfg.d_model, eps=1e-6)
        self.connectivity = AncreConnectivity(cfg.n_layers, cfg.ancre_tau)
        self.logit_multiplier = logit_multiplier(cfg)  # muP's 1/m_d (1 under standard)

    def hidden(self, idx: Tensor) -> Tensor:
        self.begin_forward(idx)
        o = self.tok_emb(idx)  # o_0: (B, T, d)
        self.record_residual_rms(o)
        mixes = ancre_mixes(self.connectivity.ingoing(), o)  # every block's sum_i p_ij o_i, as the o_i arrive
        for block in self.blocks:
            o = block(o, base=mixes.next())  # o_j
            mixes.add(o)
            self.record_residual_rms(o)
        return o

    def head(self, z: Tensor) -> Tensor:
        return scaled(rms_norm(self.norm, z), self.logit_multiplier) @ self.unembedding.T  # (B, T, V)

    def diagnostics(self) -> dict:
        return {**super().diagnostics(), "ancre_p": self.connectivity.matrix().tolist()}
