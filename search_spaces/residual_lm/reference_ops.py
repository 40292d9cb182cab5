"""The PyTorch references of the fused ops (`ops`): plain, differentiable by autograd, the ground truth.

    add_rmsnorm_reference(x, delta, w, eps) = (z, h):  z = x + delta (x when delta is None),
                                                       h = z / sqrt(mean(z^2) + eps) * w
    ancre_mix_reference(p, states)          = sum_i p_i states_i
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

__all__ = ["add_rmsnorm_reference", "ancre_mix_reference", "nag_epilogue_reference"]


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
