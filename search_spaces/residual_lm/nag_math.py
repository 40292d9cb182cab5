"""NAG's gate and rotation as plain PyTorch functions: the family's maths, and the reference that
the fused kernel (`ops.nag_epilogue`) is tested against.

A sublayer of `nag` moves the unit-RMS direction u (zero mean, ||u||^2 = d) towards its output f
by an angle theta that depends on u only through the gate m:

    gate       m = max(sum_c p_c sigmoid(w_c . u + b_c), eps)^beta,  p = softmax(mix logits), beta > 0
    rotation   tan(theta) = alpha_l m,  v = sqrt(d) f_perp / ||f_perp||,  f_perp = f - mean(f) - (<f, u> / d) u
               u' = cos(theta) u + sin(theta) v,  s' = s + log1p(tan(theta)^2) / 2

so ||x'|| / ||x|| = sec(theta) for x = exp(s) u: the log-norm lane grows by log sec(theta).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["NORM_EPS", "nag_gate", "rotate"]

NORM_EPS = 1e-6  # floor of the clamped norms and of the gate mixture


def nag_gate(pre: Tensor, mix_weights: Tensor, beta: Tensor) -> Tensor:
    """m = max(sum_c p_c sigmoid(pre_c), eps)^beta in [0, 1]: (...,) from pre (..., C).

    pre_c = w_c . u + b_c are the gate's C pre-activations, p = mix_weights (C,) a convex
    combination (softmax of the mixing logits), beta a 0-d tensor > 0 (softplus of its raw value).
    """
    return (torch.sigmoid(pre) * mix_weights).sum(-1).clamp_min(NORM_EPS) ** beta.reshape(())


def rotate(u: Tensor, f: Tensor, tan_theta: Tensor) -> tuple[Tensor, Tensor]:
    """Rotate u towards the part of f orthogonal to it by theta. Returns (u', s' - s).

    u' = cos(theta) u + sin(theta) v with v = sqrt(d) f_perp / ||f_perp||, and s' - s =
    log1p(tan(theta)^2) / 2, for u, f (..., d) and tan_theta (...,): u' = cos(theta) (u + tan v),
    cos(theta) = 1 / sqrt(1 + tan^2).

    u is zero-mean with ||u||^2 = d, so 1 and u are orthogonal and, with m = mean(f) and
    a = <f, u> / d, f_perp = f - m - a u has ||f_perp||^2 = ||f||^2 - d m^2 - d a^2. Then
    u + tan v = (1 - k a) u + k (f - m) with k = tan sqrt(d) / ||f_perp||, so

        u' = c_u u + c_f (f - m),   c_f = cos(theta) k,   c_u = cos(theta) - c_f a

    three row reductions and two passes over the rows, instead of materialising f_perp and v.
    ||u'||^2 = d holds as the paper's maths has it (u and v orthonormal up to the factor sqrt(d)),
    to rounding while ||f_perp|| is resolved; ||f_perp||^2 is clamped below at eps (f parallel to
    u, or d <= 2, where no direction orthogonal to 1 and u exists).
    """
    d = u.shape[-1]
    mean = f.mean(-1, keepdim=True)
    along_u = (f * u).sum(-1, keepdim=True) / d
    perp_sq = (f * f).sum(-1, keepdim=True) - d * (mean.square() + along_u.square())
    tan = tan_theta.unsqueeze(-1)
    cos = torch.rsqrt(1.0 + tan.square())
    c_f = cos * tan * math.sqrt(d) * torch.rsqrt(perp_sq.clamp_min(NORM_EPS))
    u_next = torch.addcmul(u * (cos - c_f * along_u), c_f, f - mean)  # (..., d)
    return u_next, 0.5 * torch.log1p(tan_theta.square())
