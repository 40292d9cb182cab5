"""The PyTorch references of the fused ops (`ops`): plain, differentiable by autograd, the ground truth.

    add_rmsnorm_reference(x, delta, w, eps) = (z, h):  z = x + delta (x when delta is None),
                                                       h = z / sqrt(mean(z^2) + eps) * w
    ancre_mix_reference(p, states)          = sum_i p_i states_i
    AncreMixesReference(p, o_0)             every block j's sum_{i<j} p_ij o_i, as the states o_i arrive
    nag_epilogue_reference(u, f, s, pre, p, beta, alpha) = rotate(u, f, alpha * nag_gate(pre, p, beta))

Each computes in at least fp32 (the NAG epilogue in the promoted dtype of its inputs) and returns its
input's dtype. The dispatchers in `ops` check shapes before calling them. This module imports nothing
outside the package, so the exported Hugging Face model (`workers.release.convert`) ships it as it is.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch import Tensor

from .nag_math import nag_gate, rotate

__all__ = ["AncreMixesReference", "add_rmsnorm_reference", "ancre_mix_reference", "nag_epilogue_reference"]


def add_rmsnorm_reference(x: Tensor, delta: Tensor | None, weight: Tensor, eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """(z, h) in plain PyTorch; the norm in at least fp32."""
    z = x if delta is None else x + delta
    compute = torch.promote_types(z.dtype, torch.float32)
    zc = z.to(compute)
    h = zc * torch.rsqrt(zc.square().mean(-1, keepdim=True) + eps) * weight.to(compute)
    return z, h.to(z.dtype)


def ancre_mix_reference(p: Tensor, states: Sequence[Tensor]) -> Tensor:
    """sum_i p_i states_i for p (j,) and j states of one shape, accumulated in at least fp32."""
    out_dtype = functools.reduce(torch.promote_types, (s.dtype for s in states))
    compute = torch.promote_types(out_dtype, torch.float32)
    terms = zip(_as(p, compute).unbind(), (_as(s, compute) for s in states), strict=True)
    p_0, state_0 = next(terms)
    out = p_0 * state_0
    for p_i, state in terms:
        out = torch.addcmul(out, p_i, state)  # out + p_i state, one pass
    return _as(out, out_dtype)


class AncreMixesReference:
    """Every block's `ancre_mix_reference` as the states arrive: block j's sum_{i<j} p_ij o_i for p (L, L) with
    p[i, j - 1] = p_ij, kept as running sums of the blocks still to come, (L - j, ...) once o_0..o_j are in.

    `next()` is the mix into the next block; `add(o_j)` adds p_ij o_j to every later block's sum in one call.
    A forward thus makes O(L) calls into torch where mixing each block from its states makes O(L^2), and a
    one-token decode step is bound by those calls. Each sum takes the same terms in the same order as
    `ancre_mix_reference` (p_0j o_0, then one multiply-add per state), so it is the same sum.
    """

    def __init__(self, p: Tensor, first: Tensor):
        self.dtype = first.dtype  # the promoted dtype of the states so far: the mix's own
        self.compute = torch.promote_types(first.dtype, torch.float32)
        self.p = _as(p, self.compute)
        self.added = 1
        self.sums = self.p[0].view(-1, *(1,) * first.dim()) * _as(first, self.compute)  # (L, ...): o_0's terms

    def next(self) -> Tensor:
        """The mix into block j, j the states added so far: (...)."""
        return _as(self.sums[0], self.dtype)

    def add(self, state: Tensor) -> None:
        """Add o_j, j the states added so far, to the sums of blocks j + 1..L (the last block's feeds none)."""
        j, self.added = self.added, self.added + 1
        if j < self.p.shape[1]:
            self.dtype = torch.promote_types(self.dtype, state.dtype)
            weights = self.p[j, j:].view(-1, *(1,) * state.dim())  # p_jk for the blocks k = j + 1..L
            self.sums = torch.addcmul(self.sums[1:], weights, _as(state, self.compute))


def _as(x: Tensor, dtype: torch.dtype) -> Tensor:
    """x in `dtype`; x itself, without a call into torch, when it is already (a one-token decode step's ops
    cost their dispatch more than their arithmetic)."""
    return x if x.dtype == dtype else x.to(dtype)


def nag_epilogue_reference(
    u: Tensor, f: Tensor, s: Tensor, pre: Tensor, mix_weights: Tensor, beta: Tensor, alpha: Tensor
) -> tuple[Tensor, Tensor]:
    """(u', s'): the gate, then `nag_math.rotate`."""
    u_next, ds = rotate(u, f, alpha.reshape(()) * nag_gate(pre, mix_weights, beta))
    return u_next.to(u.dtype), (s + ds).to(s.dtype)
