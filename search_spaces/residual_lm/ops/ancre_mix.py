"""ANCRe's ingoing mixture of earlier block outputs, without stacking them.

For coefficients p (j,) (softmax(c / tau), computed by the caller, whose autograd carries dp back
to the logits) and j states o_i of one shape (..., d):

    out = sum_i p_i o_i,        d o_i = p_i g,        d p_i = <g, o_i>      (g = dL/dout)

A `torch.stack` + matmul (the obvious implementation) first copies the j states into one (j, ...) tensor:
j extra reads and writes of the whole residual stream per block. Here the kernels receive the
states as a tuple of pointers (a Triton tuple argument, specialised on its length), so one launch
reads each state once and writes out once, accumulating in fp32 registers: (j + 1) N element
moves, the minimum. The op is elementwise, so the kernels see every tensor as a flat vector of N
elements: any d, and 16-byte vector accesses whenever N is a multiple of 16 (Triton specialises
on that), whatever d is. A launch takes at most
`_MAX_STATES_PER_LAUNCH` pointers (bounding unrolled code and registers); beyond that the states
are taken in groups and later launches add onto `out`, which in bf16 rounds once per group.

The backward reads g once per group and each state once, writes every p_i g, and writes one
partial <g, o_i> per program and state, which torch adds up. Kernels compute in fp32 whatever
the dtypes; out takes the states' promoted dtype (an fp32 embedding mixed with bf16 block outputs
gives fp32, as torch's + would), every gradient its input's dtype.

A model mixes through `ancre_mixes(p, o_0)`, every block's mix as the states arrive: on the Triton path
each block's `ancre_mix` over its states (one launch, each state read once), on the reference path
`reference_ops.AncreMixesReference`'s running sums (O(L) calls into torch per forward, not O(L^2): a
one-token decode step on the CPU is bound by its calls, not its arithmetic).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..reference_ops import AncreMixesReference, ancre_mix_reference
from . import backend, jit, tl, triton

__all__ = ["AncreMixesReference", "ancre_mix", "ancre_mix_bytes", "ancre_mix_reference", "ancre_mixes"]

_MAX_STATES_PER_LAUNCH = 32  # a 24-layer model mixes at most 25 states: one launch
_BLOCK = 1024  # elements per program: 8 per thread at 4 warps, one 16-byte load of bf16
_WARPS = 4


def ancre_mix(p: Tensor, states: Sequence[Tensor]) -> Tensor:
    """sum_i p_i states_i for p (j,) and j states of one shape: the Triton kernels where `backend` says so."""
    _check(p, states)
    if backend(p, *states) == "reference":
        return ancre_mix_reference(p, states)
    return _AncreMix.apply(p, *states)


def ancre_mixes(p: Tensor, first: Tensor) -> AncreMixesReference | _FusedMixes:
    """Every block's mix sum_{i<j} p_ij o_i as the states arrive, for p (L, L) with p[i, j - 1] = p_ij and the
    first state o_0: `next()` the mix into the next block, `add(o_j)` the next state (module docstring)."""
    if p.dim() != 2 or p.shape[0] != p.shape[1]:
        raise ValueError(f"p must be (L, L) with p[i, j - 1] = p_ij, got {tuple(p.shape)}")
    if backend(p, first) == "reference":
        return AncreMixesReference(p, first)
    return _FusedMixes(p, first)


class _FusedMixes:
    """`ancre_mixes` on the Triton path: the states kept, each block's mix one `ancre_mix` launch over them."""

    def __init__(self, p: Tensor, first: Tensor):
        self.p, self.states = p, [first]

    def next(self) -> Tensor:
        j = len(self.states)
        return ancre_mix(self.p[:j, j - 1], self.states)

    def add(self, state: Tensor) -> None:
        self.states.append(state)


def ancre_mix_bytes(rows: int, d: int, j: int, dtype: torch.dtype) -> int:
    """Bytes the forward must move at least: read j states and p (fp32), write out."""
    return dtype.itemsize * (j + 1) * rows * d + 4 * j


def _check(p: Tensor, states: Sequence[Tensor]) -> None:
    """One-line ValueError naming the first input that breaks the contract."""
    if len(states) == 0:
        raise ValueError("states must hold at least one tensor")
    if tuple(p.shape) != (len(states),):
        raise ValueError(f"p must have shape ({len(states)},) for {len(states)} states, got {tuple(p.shape)}")
    first = states[0]
    for i, state in enumerate(states):
        if state.shape != first.shape or state.device != first.device:
            raise ValueError(
                f"states[{i}] is {tuple(state.shape)} on {state.device}; "
                f"states[0] is {tuple(first.shape)} on {first.device}"
            )


def _out_dtype(states: Sequence[Tensor]) -> torch.dtype:
    dtype = states[0].dtype
    for state in states[1:]:
        dtype = torch.promote_types(dtype, state.dtype)
    return dtype


def _groups(j: int) -> list[range]:
    """Consecutive state indices, at most _MAX_STATES_PER_LAUNCH per launch."""
    return [range(start, min(start + _MAX_STATES_PER_LAUNCH, j)) for start in range(0, j, _MAX_STATES_PER_LAUNCH)]


class _AncreMix(torch.autograd.Function):
    """Triton forward and backward over flat states; saves p and the states (held by the model anyway)."""

    @staticmethod
    def forward(ctx, p, *states):
        p = p.contiguous()
        states = tuple(s.contiguous() for s in states)
        out = torch.empty_like(states[0], dtype=_out_dtype(states))
        n = out.numel()
        if n:
            grid = (triton.cdiv(n, _BLOCK),)
            for k, group in enumerate(_groups(len(states))):
                _forward_kernel[grid](
                    p,
                    group.start,
                    tuple(states[i] for i in group),
                    out,
                    n,
                    ACCUMULATE=k > 0,
                    BLOCK=_BLOCK,
                    num_warps=_WARPS,
                )
        ctx.save_for_backward(p, *states)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        p, *states = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grads = [torch.empty_like(s) for s in states]
        n = grad_out.numel()
        programs = triton.cdiv(n, _BLOCK)
        partial_p = torch.zeros(max(programs, 1), len(states), device=p.device, dtype=torch.float32)
        if n:
            for group in _groups(len(states)):
                _backward_kernel[(programs,)](
                    p,
                    group.start,
                    grad_out,
                    tuple(states[i] for i in group),
                    tuple(grads[i] for i in group),
                    partial_p,
                    len(states),
                    n,
                    BLOCK=_BLOCK,
                    num_warps=_WARPS,
                )
        grad_p = partial_p.sum(0).to(p.dtype)
        return grad_p, *grads


@jit
def _forward_kernel(p_ptr, p_start, states, out_ptr, N, ACCUMULATE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    if ACCUMULATE:
        acc = tl.load(out_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in tl.static_range(len(states)):
        p_i = tl.load(p_ptr + p_start + i).to(tl.float32)
        acc += p_i * tl.load(states[i] + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


@jit
def _backward_kernel(p_ptr, p_start, g_ptr, states, grads, partial_p_ptr, J, N, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    for i in tl.static_range(len(states)):
        p_i = tl.load(p_ptr + p_start + i).to(tl.float32)
        tl.store(grads[i] + offs, (p_i * g).to(grads[i].dtype.element_ty), mask=mask)
        state = tl.load(states[i] + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(partial_p_ptr + pid * J + p_start + i, tl.sum(g * state, axis=0))
