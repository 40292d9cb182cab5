"""The NAG sublayer epilogue: gate, rotation and log-norm update fused into one row-wise op.

Per row (u, f of length d, s a scalar, pre the C gate pre-activations w_c . u + b_c), with
shared p = mix_weights (C,), beta > 0, alpha and eps = NORM_EPS, exactly the family's
`nag_math.nag_gate` then `nag_math.rotate` (the reference, `nag_epilogue_reference`):

    mix = sum_c p_c sigmoid(pre_c),  m = max(mix, eps)^beta,  tan = alpha m
    mean = mean(f),  a = <f, u> / d,  P = ||f||^2 - d (mean^2 + a^2)   (= ||f_perp||^2)
    k = tan sqrt(d) / sqrt(max(P, eps)),  moved = (1 - k a) u + k (f - mean)
    cos = 1 / sqrt(1 + tan^2),  u' = cos moved,  s' = s + log1p(tan^2) / 2

Backward (g = dL/du', g_s = dL/ds'; f_perp = f - mean - a u; [.] is the clamp's pass mask):

    g_moved = cos g
    g_k = <g_moved, f_perp>,  g_P = -k g_k / (2 max(P, eps)) [P >= eps]
    g_f = k (g_moved - mean(g_moved) - (<g_moved, u> / d) u) + 2 g_P f_perp
    g_u = (1 - k a) g_moved - (k <g_moved, u> / d + 2 a g_P) f
    g_tan = sqrt(d) g_k / sqrt(max(P, eps)) + g_s tan / (1 + tan^2) - tan cos^2 <g, u'>
    g_alpha = sum_rows g_tan m,  g_m = alpha g_tan,  g_beta = sum_rows g_m m log(max(mix, eps))
    g_mix = g_m beta m / max(mix, eps) [mix >= eps]
    g_pre_c = g_mix p_c sigmoid'(pre_c),  g_p_c = sum_rows g_mix sigmoid(pre_c),  g_s passes through

The Triton kernels hold a block of whole rows in registers: the forward reads u, f, s, pre once
and writes u', s'; the backward recomputes everything from the saved inputs (no d-sized
intermediates are saved) and writes per-program partial sums for the three shared parameters,
which torch adds up. The kernels compute in fp32 whatever the input dtype; outputs and grads take
their input's dtype (u' that of u, s' that of s). The reference computes in the promoted dtype of
its inputs (as eager PyTorch would) and casts u', s' the same way.

d <= 2 is degenerate (no direction is orthogonal to both 1 and u): P is clamped at eps and both
paths compute the same formulas on it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..nag_math import NORM_EPS
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
def _rotation(u, f, tan, row_mask, mask, d, sqrt_d, EPS: tl.constexpr):
    """Per row: mean, a, P, 1/sqrt(max(P, eps)), k; moved (zero off the row); cos(theta)."""
    mean = tl.sum(f, axis=1) / d
    along_u = tl.sum(f * u, axis=1) / d
    perp_sq = tl.sum(f * f, axis=1) - d * (mean * mean + along_u * along_u)
    inv_perp = tl.rsqrt(tl.maximum(perp_sq, EPS))
    k = tan * sqrt_d * inv_perp
    moved = u * (1.0 - k * along_u)[:, None] + k[:, None] * (f - mean[:, None])
    moved = tl.where(mask, moved, 0.0)
    return mean, along_u, perp_sq, inv_perp, k, moved, tl.rsqrt(1.0 + tan * tan)


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
    _, _, _, _, _, moved, cos = _rotation(u, f, tan, row_mask, mask, d, sqrt_d, EPS)
    u_next = moved * cos[:, None]
    tl.store(u_out_ptr + offs, u_next.to(u_out_ptr.dtype.element_ty), mask=mask)

    s = tl.load(s_ptr + rows, mask=row_mask, other=0.0).to(tl.float32)
    s_next = s + 0.5 * _log1p(tan * tan)
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
    mean, a, perp_sq, inv_perp, k, moved, cos = _rotation(u, f, tan, row_mask, mask, d, sqrt_d, EPS)

    # Through u' = cos moved, then the rotation's row statistics.
    g_cos = tl.sum(g * moved, axis=1)
    g_moved = cos[:, None] * g
    f_perp = tl.where(mask, f - mean[:, None] - a[:, None] * u, 0.0)
    g_k = tl.sum(g_moved * f_perp, axis=1)
    g_moved_u = tl.sum(g_moved * u, axis=1) / d
    g_perp = tl.where(perp_sq >= EPS, -0.5 * k * g_k * inv_perp * inv_perp, 0.0)
    g_f = k[:, None] * (g_moved - (tl.sum(g_moved, axis=1) / d)[:, None] - g_moved_u[:, None] * u)
    g_f += (2.0 * g_perp)[:, None] * f_perp
    g_u = (1.0 - k * a)[:, None] * g_moved - (k * g_moved_u + 2.0 * a * g_perp)[:, None] * f
    tl.store(gu_ptr + offs, g_u.to(gu_ptr.dtype.element_ty), mask=mask)
    tl.store(gf_ptr + offs, g_f.to(gf_ptr.dtype.element_ty), mask=mask)

    # Through tan = alpha m and m = max(mix, eps)^beta to the gate's inputs.
    g_tan = sqrt_d * g_k * inv_perp + g_s * tan / (1.0 + tan * tan) - tan * cos * cos * cos * g_cos
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
