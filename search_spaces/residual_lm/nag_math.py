"""NAG's gate and rotation as plain PyTorch functions: the family's maths, and the reference that
the fused kernel (`ops.nag_epilogue`) is tested against.

A sublayer of `nag` moves the unit-RMS direction u (zero mean, ||u||^2 = d) towards its output f
by an angle theta that depends on u only through the gate m:

    gate       m = max(sum_c p_c sigmoid(w_c . u + b_c), eps)^beta,  p = softmax(mix logits), beta > 0
    rotation   tan(theta) = alpha_l m,  v = sqrt(d) f_perp / ||f_perp||,  f_perp = f - mean(f) - (<f, u> / d) u
               u' = cos(theta) u + sin(theta) v,  s' = s + log1p(tan(theta)^2) / 2

so ||x'|| / ||x|| = sec(theta) for x = exp(s) u: the log-norm lane grows by log sec(theta). Where f
has no part orthogonal to 1 and u (f_perp zero up to rounding, and always for d <= 2) there is no v:
nothing is added to x, so x' = x, that is u' = u and s' = s.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

__all__ = ["NORM_EPS", "PARALLEL_TOL", "WELL_CONDITIONED", "nag_gate", "rotate", "rotate_exact"]

NORM_EPS = 1e-6  # floor of the clamped norms and of the gate mixture
# f_perp is rounding noise when ||f_perp||^2 <= PARALLEL_TOL ||f||^2: fp32 leaves f = c u + b 1 with
# ||f_perp||^2 / ||f||^2 up to ~4e-14 (d = 3..16384), so this keeps a 50x margin on ||f_perp|| / ||f||.
PARALLEL_TOL = 1e-10
# Where every row's f has at least this share of its square orthogonal to 1 and u, the rotation's norms follow from
# five row sums to a few ulps (fp32 cancellation costs a factor ||f||^2 / ||f_perp||^2 of its 2^-24, at most 2
# here): `rotate` then reads each row a few times and writes u' once; otherwise it projects f_perp out explicitly
# (`rotate_exact`). A sublayer's output in many dimensions is mostly orthogonal to the stream it is added to.
WELL_CONDITIONED = 0.5


def nag_gate(pre: Tensor, mix_weights: Tensor, beta: Tensor) -> Tensor:
    """m = max(sum_c p_c sigmoid(pre_c), eps)^beta in [0, 1]: (...,) from pre (..., C).

    pre_c = w_c . u + b_c are the gate's C pre-activations, p = mix_weights (C,) a convex
    combination (softmax of the mixing logits), beta a 0-d tensor > 0 (softplus of its raw value).
    """
    return (torch.sigmoid(pre) * mix_weights).sum(-1).clamp_min(NORM_EPS) ** beta.reshape(())


def rotate(u: Tensor, f: Tensor, tan_theta: Tensor) -> tuple[Tensor, Tensor]:
    """Rotate u towards the part of f orthogonal to it by theta. Returns (u', s' - s): `rotate_exact`'s function.

    Where every row is well conditioned (||f_perp||^2 > WELL_CONDITIONED ||f||^2, d > 2), its norms come from five
    row sums, each one read of the rows with no temporary (m = mean(f), a = <f, u> / d, ||f||^2, ||u||^2, sum(u)).
    With g = <u, f - m> = <f, u> - m sum(u), `rotate_exact`'s two projections take b = a + c of u,
    c = (g - a ||u||^2) / d, and

        f_perp = f - m - b u,   ||f_perp||^2 = ||f - m||^2 - 2 b g + b^2 ||u||^2,   ||f - m||^2 = ||f||^2 - d m^2,
        w = (1 - k b) u + k (f - m),  k = tan sqrt(d) / ||f_perp||,
        ||w||^2 = (1 - k b)^2 ||u||^2 + 2 (1 - k b) k g + k^2 ||f - m||^2,

    so u' = sqrt(d) w / ||w|| is the same function (gradients included), written in one pass: ||u'||^2 = d to a few
    ulps whatever u's own drift. Otherwise (f nearly or exactly parallel to u somewhere) `rotate_exact`."""
    d = u.shape[-1]
    compute = functools.reduce(torch.promote_types, (u.dtype, f.dtype, tan_theta.dtype, torch.float32))
    uc, fc = u.to(compute), f.to(compute)
    mean = fc.mean(-1, keepdim=True)
    dot = torch.linalg.vecdot(fc, uc).unsqueeze(-1)
    f_sq = torch.linalg.vecdot(fc, fc).unsqueeze(-1)
    u_sq = torch.linalg.vecdot(uc, uc).unsqueeze(-1)
    centred_sq = f_sq - d * mean.square()
    cross = dot - mean * uc.sum(-1, keepdim=True)
    along_u = dot / d + (cross - dot / d * u_sq) / d  # b: both projections onto u
    perp_sq = centred_sq - 2 * along_u * cross + along_u.square() * u_sq
    if d <= 2 or not bool((perp_sq > WELL_CONDITIONED * f_sq).all()):
        return rotate_exact(u, f, tan_theta)
    tan = tan_theta.to(compute).unsqueeze(-1)
    k = tan * math.sqrt(d) * torch.rsqrt(perp_sq)
    c_u = 1.0 - k * along_u
    w_sq = c_u.square() * u_sq + 2 * c_u * k * cross + k.square() * centred_sq
    scale = math.sqrt(d) * torch.rsqrt(w_sq.clamp_min(NORM_EPS))
    u_next = torch.addcmul(uc * (scale * c_u), scale * k, fc - mean)  # (..., d)
    return u_next, 0.5 * torch.log1p(tan_theta.to(compute).square())


def rotate_exact(u: Tensor, f: Tensor, tan_theta: Tensor) -> tuple[Tensor, Tensor]:
    """Rotate u towards the part of f orthogonal to it by theta. Returns (u', s' - s).

    For u, f (..., d) and tan_theta (...,), f_perp is f less its mean and its component along u,
    the latter removed twice (Gram-Schmidt: the second pass takes out what rounding a left along u,
    ||f|| / ||f_perp|| times its ulp when f is nearly parallel to u):

        y = f - mean(f) - a u,  a = <f, u> / d;   f_perp = y - c u,  c = <y, u> / d
        w = u + k f_perp,  k = tan(theta) sqrt(d) / ||f_perp||;   u' = sqrt(d) w / ||w||,  s' - s = log1p(tan^2) / 2

    For a zero-mean u with ||u||^2 = d, ||w||^2 = d (1 + tan^2) and u' = cos(theta) u + sin(theta) v.
    ||f_perp|| and ||w|| are summed over the vectors themselves, so ||u'||^2 = d to rounding
    however nearly parallel f is to u and whatever u's own drift; ||w|| is clamped below at sqrt(eps).

    If ||f_perp||^2 <= PARALLEL_TOL ||f||^2, with ||f||^2 taken as ||f_perp||^2 + d (mean(f)^2 + a^2),
    or d <= 2, f_perp is rounding noise: tan is taken as 0, so u' = sqrt(d) u / ||u|| (u to
    rounding), s' = s, and f and tan_theta get no gradient. Computed in the promoted dtype of the
    inputs and fp32.
    """
    d = u.shape[-1]
    compute = functools.reduce(torch.promote_types, (u.dtype, f.dtype, tan_theta.dtype, torch.float32))
    u, f = u.to(compute), f.to(compute)
    mean = f.mean(-1, keepdim=True)
    along_u = (f * u).sum(-1, keepdim=True) / d
    y = torch.addcmul(f - mean, along_u, u, value=-1.0)
    perp = torch.addcmul(y, (y * u).sum(-1, keepdim=True) / d, u, value=-1.0)  # f_perp (..., d)
    perp_norm = torch.linalg.vector_norm(perp, dim=-1, keepdim=True)
    f_sq = perp_norm.square() + d * (mean.square() + along_u.square())
    turns = (perp_norm.square() > PARALLEL_TOL * f_sq) & (d > 2)
    tan = torch.where(turns, tan_theta.to(compute).unsqueeze(-1), 0.0)
    w = torch.addcmul(u, tan * math.sqrt(d) / torch.where(turns, perp_norm, 1.0), perp)  # (..., d)
    w_norm = torch.linalg.vector_norm(w, dim=-1, keepdim=True).clamp_min(math.sqrt(NORM_EPS))
    return w * (math.sqrt(d) / w_norm), 0.5 * torch.log1p(tan.squeeze(-1).square())
