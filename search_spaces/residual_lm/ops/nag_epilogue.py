"""The NAG sublayer epilogue: gate, rotation and log-norm update fused into one row-wise op.

Per row (u, f of length d, s a scalar, pre the C gate pre-activations w_c . u + b_c), with
shared p = mix_weights (C,), beta > 0, alpha, eps = NORM_EPS and tol = PARALLEL_TOL, exactly the
family's `nag_math.nag_gate` then `nag_math.rotate` (the reference, `nag_epilogue_reference`):

    mix = sum_c p_c sigmoid(pre_c),  m = max(mix, eps)^beta,  tan = alpha m
    a = <f, u> / d,  y = f - mean(f) - a u,  c = <y, u> / d,  f_perp = y - c u,  U = ||u||^2
    P = ||f_perp||^2 = ||y||^2 - c (2 <y, u> - c U),  Q = <u, f_perp> = <y, u> - c U
    turns = P > tol (P + d (mean(f)^2 + a^2)) and d > 2,  k = tan sqrt(d) / sqrt(P) if turns else 0
    w = u + k f_perp = (1 - k c) u + k y,  W = ||w||^2 = U + k (2 Q + k P),  r = sqrt(d) / sqrt(max(W, eps))
    u' = r w,  s' = s + log1p(tan^2) / 2 if turns else s

Backward (g = dL/du', g_s = dL/ds'; where the row does not turn, k = g_P = g_tan = 0):

    g_w = r (g - [W >= eps] (<g, u'> / d) u'),  g_k = <g_w, f_perp>,  g_P = -k g_k / (2 P)
    g_fp = k g_w + 2 g_P f_perp,  h2 = <g_fp, u> / d,  g_y = g_fp - h2 u,  h1 = <g_y, u> / d
    g_f = g_y - mean(g_y) - h1 u,  g_u = g_w - c g_fp - h2 y - a g_y - h1 f
    g_tan = sqrt(d) g_k / sqrt(P) + g_s tan / (1 + tan^2)
    g_alpha = sum_rows g_tan m,  g_m = alpha g_tan,  g_beta = sum_rows g_m m log(max(mix, eps))
    g_mix = g_m beta m / max(mix, eps) [mix >= eps]
    g_pre_c = g_mix p_c sigmoid'(pre_c),  g_p_c = sum_rows g_mix sigmoid(pre_c),  g_s passes through

Every row sum above is a combination of sums over u, f, g (a first round) and over y, g y (a
second, once a is known): <g, u'> = r (<g, u> + k <g, f_perp>), <g_w, f_perp> = r (<g, f_perp> -
(<g, u'> / d) r (Q + k P)), <g_w, u>, sum(g_w), h2 and mean(g_y) alike. The forward and the backward
each make these two rounds of row reductions; the second keeps P accurate to rounding when f is
nearly parallel to u.

The Triton kernels hold a block of whole rows in registers: the forward reads u, f, s, pre once
and writes u', s'; the backward recomputes everything from the saved inputs (no d-sized
intermediates are saved) and writes per-program partial sums for the three shared parameters,
which torch adds up. The kernels compute in fp32 whatever the input dtype; outputs and grads take
their input's dtype (u' that of u, s' that of s). The reference rotates in the promoted dtype of
its inputs and fp32 and casts u', s' back the same way.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..nag_math import NORM_EPS, PARALLEL_TOL
from ..reference_ops import nag_epilogue_reference
from . import backend, jit, tl, triton

__all__ = ["nag_epilogue", "nag_epilogue_bytes", "nag_epilogue_reference"]

MAX_D = 65536  # a row must fit in one program's registers
_TILE = 4096  # elements of a (rows, d) block per program


def nag_epilogue(
    u: Tensor, f: Tensor, s: Tensor, pre: Tensor, mix_weights: Tensor, beta: Tensor, alpha: Tensor
) -> tuple[Tensor, Tensor]:
    """(u', s') for u, f (..., d), s (...,), pre (..., C), mix_weights (C,), beta and alpha 0-d.

    The Triton kernels where `backend(...)` says so for all seven inputs (CUDA), the reference elsewhere
    (autograd through it; docs/design.md, "CPU step cost", says why it has no written-out backward).
    """
    _check(u, f, s, pre, mix_weights, beta, alpha)
    if backend(u, f, s, pre, mix_weights, beta, alpha) == "reference":
        return nag_epilogue_reference(u, f, s, pre, mix_weights, beta, alpha)
    lead, d, c = u.shape[:-1], u.shape[-1], pre.shape[-1]
    u_next, s_next = _NagEpilogue.apply(
        u.reshape(-1, d),
        f.reshape(-1, d),
        s.reshape(-1),
        pre.reshape(-1, c),
        mix_weights,
        beta,
        alpha,
    )
    return u_next.view(*lead, d), s_next.view(lead)


def nag_epilogue_bytes(n: int, d: int, c: int, dtype: torch.dtype) -> int:
    """Bytes the forward must move at least: read u, f, s, pre; write u', s' (n rows of width d)."""
    return dtype.itemsize * (3 * n * d + 2 * n + n * c)


def _check(u, f, s, pre, mix_weights, beta, alpha) -> None:
    """One-line ValueError naming the first input whose shape breaks the contract."""
    if u.dim() < 1 or not 1 <= u.shape[-1] <= MAX_D:
        raise ValueError(f"u must be (..., d) with 1 <= d <= {MAX_D}, got shape {tuple(u.shape)}")
    if pre.dim() < 1 or pre.shape[-1] < 1:
        raise ValueError(f"pre must be (..., C) with C >= 1, got shape {tuple(pre.shape)}")
    lead, c = tuple(u.shape[:-1]), pre.shape[-1]
    expected = {"f": (f, tuple(u.shape)), "s": (s, lead), "pre": (pre, (*lead, c)), "mix_weights": (mix_weights, (c,))}
    for name, (tensor, shape) in expected.items():
        if tuple(tensor.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(tensor.shape)}")
    for name, tensor in (("beta", beta), ("alpha", alpha)):
        if tensor.numel() != 1:
            raise ValueError(f"{name} must be a 0-d tensor, got shape {tuple(tensor.shape)}")


def _launch(n: int, d: int, c: int) -> dict:
    """Block sizes: whole rows (d padded to a power of two), as many rows as fit in _TILE, and
    16 elements per thread (sm_90, d = 768: 64 registers forward, 128 backward, no spills)."""
    block_d = triton.next_power_of_2(d)
    block_n = max(1, min(_TILE // block_d, triton.next_power_of_2(n)))
    warps = min(16, max(1, block_n * block_d // 256))
    block_c = triton.next_power_of_2(c)
    return {"BLOCK_N": block_n, "BLOCK_D": block_d, "BLOCK_C": block_c, "num_warps": warps}


class _NagEpilogue(torch.autograd.Function):
    """Triton forward and backward on (N, d) rows; saves only the inputs."""

    @staticmethod
    def forward(ctx, u, f, s, pre, mix_weights, beta, alpha):
        u, f, s, pre = u.contiguous(), f.contiguous(), s.contiguous(), pre.contiguous()
        mix_weights, beta, alpha = mix_weights.contiguous(), beta.contiguous(), alpha.contiguous()
        (n, d), c = u.shape, pre.shape[1]
        u_next, s_next = torch.empty_like(u), torch.empty_like(s)
        if n:
            cfg = _launch(n, d, c)
            _forward_kernel[(triton.cdiv(n, cfg["BLOCK_N"]),)](
                u,
                f,
                s,
                pre,
                mix_weights,
                beta,
                alpha,
                u_next,
                s_next,
                n,
                d,
                c,
                math.sqrt(d),
                EPS=NORM_EPS,
                TOL=PARALLEL_TOL,
                **cfg,
            )
        ctx.save_for_backward(u, f, pre, mix_weights, beta, alpha)
        return u_next, s_next

    @staticmethod
    def backward(ctx, grad_u_next, grad_s_next):
        u, f, pre, mix_weights, beta, alpha = ctx.saved_tensors
        (n, d), c = u.shape, pre.shape[1]
        cfg = _launch(n, d, c)
        programs = triton.cdiv(n, cfg["BLOCK_N"])
        grad_u, grad_f, grad_pre = torch.empty_like(u), torch.empty_like(f), torch.empty_like(pre)
        part_mix = torch.zeros(programs, c, device=u.device, dtype=torch.float32)
        part_beta = torch.zeros(programs, device=u.device, dtype=torch.float32)
        part_alpha = torch.zeros(programs, device=u.device, dtype=torch.float32)
        if n:
            _backward_kernel[(programs,)](
                u,
                f,
                pre,
                mix_weights,
                beta,
                alpha,
                grad_u_next.contiguous(),
                grad_s_next.contiguous(),
                grad_u,
                grad_f,
                grad_pre,
                part_mix,
                part_beta,
                part_alpha,
                n,
                d,
                c,
                math.sqrt(d),
                EPS=NORM_EPS,
                TOL=PARALLEL_TOL,
                **cfg,
            )
        return (
            grad_u,
            grad_f,
            grad_s_next,
            grad_pre,
            part_mix.sum(0).to(mix_weights.dtype),
            part_beta.sum().reshape(beta.shape).to(beta.dtype),
            part_alpha.sum().reshape(alpha.shape).to(alpha.dtype),
        )


@jit
def _gate(pre_ptr, w_ptr, beta, rows, row_mask, C, BLOCK_C: tl.constexpr, EPS: tl.constexpr):
    """Per row: sigmoid(pre) (BLOCK_N, BLOCK_C), weights p, mix, max(mix, eps), log of it, m."""
    cols = tl.arange(0, BLOCK_C)
    col_mask = cols < C
    mask = row_mask[:, None] & col_mask[None, :]
    offs = rows[:, None].to(tl.int64) * C + cols[None, :]
    pre = tl.load(pre_ptr + offs, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(pre.to(tl.float32))
    mix = tl.sum(sig * w[None, :], axis=1)
    log_mix = tl.log(tl.maximum(mix, EPS))
    return sig, w, mix, log_mix, tl.exp(beta * log_mix)


@jit
def _rotation(u, f, tan, mask, d, sqrt_d, EPS: tl.constexpr, TOL: tl.constexpr):
    """Per row: a, y (zero off the row), c, U, P, Q, turns, k, W, r; two rounds of row sums."""
    mean = tl.sum(f, axis=1) / d
    a = tl.sum(f * u, axis=1) / d
    u_sq = tl.sum(u * u, axis=1)
    y = tl.where(mask, f - mean[:, None] - a[:, None] * u, 0.0)
    y_u = tl.sum(y * u, axis=1)
    c = y_u / d
    perp_sq = tl.sum(y * y, axis=1) - c * (2.0 * y_u - c * u_sq)
    perp_u = y_u - c * u_sq
    turns = (perp_sq > TOL * (perp_sq + d * (mean * mean + a * a))) & (d > 2)
    k = tl.where(turns, tan * sqrt_d * tl.rsqrt(tl.where(turns, perp_sq, 1.0)), 0.0)
    w_sq = u_sq + k * (2.0 * perp_u + k * perp_sq)
    r = sqrt_d * tl.rsqrt(tl.maximum(w_sq, EPS))
    return a, y, c, u_sq, perp_sq, perp_u, turns, k, w_sq, r


@jit
def _log1p(x):
    """log(1 + x) accurate for small x (Goldberg): log(w) x / (w - 1) with w = 1 + x."""
    w = 1.0 + x
    return tl.where(w == 1.0, x, tl.log(w) * x / tl.where(w == 1.0, 1.0, w - 1.0))


@jit
def _forward_kernel(
    u_ptr,
    f_ptr,
    s_ptr,
    pre_ptr,
    w_ptr,
    beta_ptr,
    alpha_ptr,
    u_out_ptr,
    s_out_ptr,
    N,
    d,
    C,
    sqrt_d,
    EPS: tl.constexpr,
    TOL: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    cols = tl.arange(0, BLOCK_D)
    mask = row_mask[:, None] & (cols < d)[None, :]
    offs = rows[:, None].to(tl.int64) * d + cols[None, :]
    u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    f = tl.load(f_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr).to(tl.float32)
    alpha = tl.load(alpha_ptr).to(tl.float32)

    _, _, _, _, m = _gate(pre_ptr, w_ptr, beta, rows, row_mask, C, BLOCK_C, EPS)
    tan = alpha * m
    _, y, c, _, _, _, turns, k, _, r = _rotation(u, f, tan, mask, d, sqrt_d, EPS, TOL)
    u_next = r[:, None] * ((1.0 - k * c)[:, None] * u + k[:, None] * y)
    tl.store(u_out_ptr + offs, u_next.to(u_out_ptr.dtype.element_ty), mask=mask)

    s = tl.load(s_ptr + rows, mask=row_mask, other=0.0).to(tl.float32)
    s_next = s + tl.where(turns, 0.5 * _log1p(tan * tan), 0.0)
    tl.store(s_out_ptr + rows, s_next.to(s_out_ptr.dtype.element_ty), mask=row_mask)


@jit
def _backward_kernel(
    u_ptr,
    f_ptr,
    pre_ptr,
    w_ptr,
    beta_ptr,
    alpha_ptr,
    gu_next_ptr,
    gs_next_ptr,
    gu_ptr,
    gf_ptr,
    gpre_ptr,
    part_w_ptr,
    part_beta_ptr,
    part_alpha_ptr,
    N,
    d,
    C,
    sqrt_d,
    EPS: tl.constexpr,
    TOL: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """One program: the backward of `BLOCK_N` rows, in registers from load to store.

    Its length is its argument list (twenty pointers and sizes) and one fused program: splitting it
    into `@triton.jit` helpers would only move the loads away from the arithmetic that uses them.
    """
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    cols = tl.arange(0, BLOCK_D)
    mask = row_mask[:, None] & (cols < d)[None, :]
    offs = rows[:, None].to(tl.int64) * d + cols[None, :]
    u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    f = tl.load(f_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(gu_next_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g_s = tl.load(gs_next_ptr + rows, mask=row_mask, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr).to(tl.float32)
    alpha = tl.load(alpha_ptr).to(tl.float32)

    # Recompute the forward.
    sig, w, mix, log_mix, m = _gate(pre_ptr, w_ptr, beta, rows, row_mask, C, BLOCK_C, EPS)
    tan = alpha * m
    a, y, c, u_sq, perp_sq, perp_u, turns, k, w_sq, r = _rotation(u, f, tan, mask, d, sqrt_d, EPS, TOL)
    u_next = r[:, None] * ((1.0 - k * c)[:, None] * u + k[:, None] * y)

    # Through u' = r w and w = u + k f_perp; each row sum from the two rounds (no third).
    u_sum, g_sum, g_dot_u = tl.sum(u, axis=1), tl.sum(g, axis=1), tl.sum(g * u, axis=1)
    perp_sum = tl.sum(y, axis=1) - c * u_sum
    g_perp = tl.sum(g * y, axis=1) - c * g_dot_u  # <g, f_perp>
    proj = tl.where(w_sq >= EPS, r * (g_dot_u + k * g_perp) / d, 0.0)  # <g, u'> / d
    g_w = r[:, None] * (g - proj[:, None] * u_next)
    g_w_u = r * (g_dot_u - proj * r * (u_sq + k * perp_u))  # <g_w, u>
    g_w_sum = r * (g_sum - proj * r * (u_sum + k * perp_sum))
    g_k = r * (g_perp - proj * r * (perp_u + k * perp_sq))  # <g_w, f_perp>
    inv_perp = tl.rsqrt(tl.where(turns, perp_sq, 1.0))
    g_perp_sq = tl.where(turns, -0.5 * k * g_k * inv_perp * inv_perp, 0.0)

    # Through f_perp = y - c u, then y = f - mean(f) - a u.
    g_fp = k[:, None] * g_w + (2.0 * g_perp_sq)[:, None] * (y - c[:, None] * u)
    h2 = (k * g_w_u + 2.0 * g_perp_sq * perp_u) / d  # <g_fp, u> / d
    h1 = h2 * (d - u_sq) / d  # <g_y, u> / d
    g_y = g_fp - h2[:, None] * u
    g_y_mean = (k * g_w_sum + 2.0 * g_perp_sq * perp_sum - h2 * u_sum) / d
    g_f = g_y - g_y_mean[:, None] - h1[:, None] * u
    g_u = g_w - c[:, None] * g_fp - h2[:, None] * y - a[:, None] * g_y - h1[:, None] * f
    tl.store(gu_ptr + offs, g_u.to(gu_ptr.dtype.element_ty), mask=mask)
    tl.store(gf_ptr + offs, g_f.to(gf_ptr.dtype.element_ty), mask=mask)

    # Through tan = alpha m and m = max(mix, eps)^beta to the gate's inputs.
    g_tan = tl.where(turns, sqrt_d * g_k * inv_perp + g_s * tan / (1.0 + tan * tan), 0.0)
    g_m = alpha * g_tan
    g_mix = tl.where(mix >= EPS, g_m * beta * m * tl.exp(-log_mix), 0.0)
    c_cols = tl.arange(0, BLOCK_C)
    c_mask = row_mask[:, None] & (c_cols < C)[None, :]
    g_pre = g_mix[:, None] * w[None, :] * sig * (1.0 - sig)
    tl.store(
        gpre_ptr + rows[:, None].to(tl.int64) * C + c_cols[None, :], g_pre.to(gpre_ptr.dtype.element_ty), mask=c_mask
    )

    # Per-program partial sums for the shared parameters (padding rows contribute zero).
    part_w = tl.sum(tl.where(c_mask, g_mix[:, None] * sig, 0.0), axis=0)
    tl.store(part_w_ptr + pid * C + c_cols, part_w, mask=c_cols < C)
    tl.store(part_beta_ptr + pid, tl.sum(tl.where(row_mask, g_m * m * log_mix, 0.0), axis=0))
    tl.store(part_alpha_ptr + pid, tl.sum(tl.where(row_mask, g_tan * m, 0.0), axis=0))
