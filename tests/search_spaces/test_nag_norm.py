"""NAG keeps ||u'||^2 = d to rounding in every case: f nearly or exactly parallel to u, d <= 2, and
bf16 through 96 stacked rotations; the reference and the Triton kernels (TRITON_INTERPRET=1 on
CPU) agree there, forward and backward."""

import math

import pytest
import torch

from kernel_helpers import DEVICE, needs_triton
from search_spaces.residual_lm.nag_math import rotate
from search_spaces.residual_lm.ops import interpreting, use_backend
from search_spaces.residual_lm.ops.nag_epilogue import nag_epilogue, nag_epilogue_reference

D = 768
NEAR_PARALLEL = [1e-2, 3e-3, 1e-3]  # size (RMS) of f's part orthogonal to 1 and u, beside 5u
NORM_TOL = 1e-5  # fp32: u' = r w rounds each element once (2^-24) and r by an ulp or two, ~3e-7 on ||u'||^2 / d
# One bf16 rounding to nearest of u' (2^-9 per element) moves ||u'||^2 / d by 2^-8 at worst and, over
# d = 768 independent errors, by ~2^-8 sqrt(3 / d) ~ 2e-4 per row. Triton's interpreter rounds toward
# zero: every element shrinks by up to 2^-8, so ||u'||^2 / d by up to 2^-7 (~2^-8 on average).
BF16_NORM_TOL = {"nearest": 2.0**-9, "toward zero": 2.0**-7}


def unit_rms_direction(n: int, d: int, dtype=torch.float32) -> torch.Tensor:
    """Rows zero-mean with ||u||^2 = d (to fp64 rounding before the cast); rows of +-1 for d = 1."""
    if d == 1:
        return torch.where(torch.rand(n, 1) < 0.5, -1.0, 1.0).to(dtype)
    u = torch.randn(n, d, dtype=torch.float64)
    u = u - u.mean(-1, keepdim=True)
    return (u * (math.sqrt(d) / u.norm(dim=-1, keepdim=True))).to(dtype)


def orthogonal_part(u: torch.Tensor) -> torch.Tensor:
    """Unit-RMS rows orthogonal to 1 and to u (in fp64)."""
    u = u.double()
    w = torch.randn_like(u)
    w = w - w.mean(-1, keepdim=True)
    w = w - (w * u).sum(-1, keepdim=True) / (u * u).sum(-1, keepdim=True) * u
    return w * (math.sqrt(u.shape[-1]) / w.norm(dim=-1, keepdim=True))


def near_parallel(u: torch.Tensor, perp: float) -> torch.Tensor:
    """f = 5u + perp w, w unit-RMS and orthogonal to 1 and u, rounded to u's dtype."""
    return (5 * u.double() + perp * orthogonal_part(u)).to(u.dtype)


def norm_drift(u_next: torch.Tensor) -> float:
    """max over rows of | ||u'||^2 / d - 1 |, summed in fp64."""
    return ((u_next.double().square().sum(-1) / u_next.shape[-1]) - 1).abs().max().item()


def tangents(n: int) -> torch.Tensor:
    """tan(theta) for n rows, from a small rotation to 72 degrees."""
    return torch.linspace(0.05, 3.0, n)


def conditioned_tol(perp: float) -> float:
    """Relative agreement to expect between two fp32 evaluations for f = 5u + perp w (0: f = 5u): f_perp
    is a difference of terms ||f|| / ||f_perp|| = 5 / perp times larger, so it carries that many ulps
    (2^-24) of f; 10 times that, and never below 1e-5."""
    return max(1e-5, 10 * 2.0**-24 * 5 / perp) if perp else 1e-5


@pytest.mark.parametrize("perp", NEAR_PARALLEL)
def test_reference_keeps_the_norm_and_the_angle_near_parallel(perp):
    """f = 5u + perp w: u' stays on the sphere and turns by theta = atan(tan), both to rounding (the
    second Gram-Schmidt pass keeps f_perp orthogonal to u), and s grows by log sec(theta)."""
    u = unit_rms_direction(64, D)
    f, tan = near_parallel(u, perp), tangents(64)
    u_next, ds = rotate(u, f, tan)
    assert norm_drift(u_next) < NORM_TOL
    cos_angle = (u_next.double() * u.double()).sum(-1) / D
    torch.testing.assert_close(cos_angle, torch.cos(torch.atan(tan.double())), rtol=0, atol=1e-6)
    torch.testing.assert_close(ds, 0.5 * torch.log1p(tan.square()))


@pytest.mark.parametrize("offset", [0.0, 3.0], ids=["f=5u", "f=5u+3"])
def test_reference_exactly_parallel_does_not_turn(offset):
    """No part of f is orthogonal to 1 and u: no direction to turn to, so u' = u and s' = s."""
    u = unit_rms_direction(64, D)
    u_next, ds = rotate(u, 5 * u + offset, tangents(64))
    assert norm_drift(u_next) < NORM_TOL
    torch.testing.assert_close(u_next, u, rtol=0, atol=1e-6)
    assert torch.equal(ds, torch.zeros(64))


def test_reference_zero_output_does_not_turn():
    u = unit_rms_direction(8, D)
    u_next, ds = rotate(u, torch.zeros_like(u), tangents(8))
    torch.testing.assert_close(u_next, u, rtol=0, atol=1e-6)
    assert torch.equal(ds, torch.zeros(8))


@pytest.mark.parametrize("d", [1, 2])
def test_reference_d_at_most_2_does_not_turn(d):
    """d <= 2: no direction is orthogonal to both 1 and u, whatever f is."""
    u = unit_rms_direction(16, d)
    u_next, ds = rotate(u, torch.randn(16, d), tangents(16))
    torch.testing.assert_close(u_next, u, rtol=0, atol=1e-6)
    assert torch.equal(ds, torch.zeros(16))


def test_reference_renormalises_a_drifted_u():
    """u with ||u||^2 = 1.01 d comes out with ||u'||^2 = d."""
    u = unit_rms_direction(16, D) * math.sqrt(1.01)
    assert norm_drift(rotate(u, torch.randn(16, D), tangents(16))[0]) < NORM_TOL


@pytest.mark.parametrize("f_kind", ["near-parallel", "parallel"])
def test_reference_gradcheck_float64_near_and_exactly_parallel(f_kind):
    """Autograd through both branches agrees with finite differences (fp64)."""
    u = unit_rms_direction(3, 8, torch.float64)
    f = near_parallel(u, 1e-3) if f_kind == "near-parallel" else 5 * u
    tan = torch.tensor([0.3, 1.0, 2.0], dtype=torch.float64)
    inputs = [x.clone().requires_grad_() for x in (u, f, tan)]
    assert torch.autograd.gradcheck(rotate, inputs, eps=1e-7, atol=1e-6)


def epilogue_inputs(u: torch.Tensor, f: torch.Tensor, c: int = 4, param_dtype=torch.float32):
    """(u, f, s, pre, mix_weights, beta, alpha) on DEVICE, leaves requiring grad."""
    n = u.shape[0]
    rows = [u, f, torch.randn(n).to(u.dtype), (2 * torch.randn(n, c)).to(u.dtype)]
    params = [torch.softmax(torch.randn(c), 0), torch.tensor(0.8), torch.tensor(1.7)]
    return [x.to(DEVICE).requires_grad_() for x in rows + [p.to(param_dtype) for p in params]]


def outputs_and_grads(fn, inputs, upstream):
    """(u', s') and the gradients of <u', g_u> + <s', g_s> for all 7 inputs."""
    u_next, s_next = fn(*inputs)
    loss = (u_next.float() * upstream[0]).sum() + (s_next.float() * upstream[1]).sum()
    return [u_next, s_next, *torch.autograd.grad(loss, inputs)]


NAMES = ["u_next", "s_next", "grad_u", "grad_f", "grad_s", "grad_pre", "grad_mix_weights", "grad_beta", "grad_alpha"]
KERNEL_CASES = [pytest.param(p, id=f"perp={p:g}") for p in NEAR_PARALLEL] + [pytest.param(0.0, id="parallel")]


@needs_triton
@pytest.mark.parametrize("perp", KERNEL_CASES)
def test_triton_matches_reference_near_and_exactly_parallel(perp):
    """Kernel and reference on the same fp32 inputs: outputs and all 7 gradients, to
    `conditioned_tol` of each tensor's scale (the two paths sum a = <f, u> / d in different orders)."""
    u = unit_rms_direction(24, D)
    f = near_parallel(u, perp) if perp else 5 * u
    inputs = epilogue_inputs(u, f)
    upstream = (torch.randn(24, D, device=DEVICE), torch.randn(24, device=DEVICE))
    expected = outputs_and_grads(nag_epilogue_reference, inputs, upstream)
    with use_backend("triton"):
        actual = outputs_and_grads(nag_epilogue, inputs, upstream)
    assert norm_drift(actual[0]) < NORM_TOL
    rel = conditioned_tol(perp)
    for name, a, e in zip(NAMES, actual, expected, strict=True):
        assert torch.isfinite(a).all(), name
        scale = max(e.abs().max().item(), 1.0)
        assert (a - e).abs().max().item() <= rel * scale, name
    if not perp:  # nothing turned: s passes through, f and the gate get no gradient
        assert torch.equal(actual[1], inputs[2])
        assert all(g.abs().max() == 0 for g in actual[3:4] + actual[5:])


@pytest.mark.parametrize("param_dtype", [torch.float32, torch.bfloat16], ids=["fp32-params", "bf16-params"])
@pytest.mark.parametrize("path", ["reference", pytest.param("triton", marks=needs_triton)])
def test_bf16_norm_holds_through_96_rotations(path, param_dtype):
    """bf16 u, f, s through 96 stacked epilogues (alpha_l = l^-0.5): every layer renormalises, so the
    drift is one bf16 rounding of u' whatever the depth (BF16_NORM_TOL)."""
    n = 8 if path == "triton" else 64  # the interpreter runs one program per 4 rows
    u, s = unit_rms_direction(n, D, torch.bfloat16).to(DEVICE), torch.zeros(n, dtype=torch.bfloat16, device=DEVICE)
    worst = 0.0
    with torch.no_grad(), use_backend(path):
        for layer in range(1, 97):
            f, pre = torch.randn(n, D).bfloat16().to(DEVICE), torch.randn(n, 8).bfloat16().to(DEVICE)
            params = [torch.softmax(torch.randn(8), 0), torch.tensor(1.0), torch.tensor(layer**-0.5)]
            u, s = nag_epilogue(u, f, s, pre, *(p.to(DEVICE, param_dtype) for p in params))
            worst = max(worst, norm_drift(u))
    rounding = "toward zero" if path == "triton" and interpreting() else "nearest"
    assert u.dtype == torch.bfloat16 and worst < BF16_NORM_TOL[rounding]


@pytest.mark.parametrize("drift", [0.0, 1e-2], ids=["on the sphere", "drifted u"])
def test_the_one_pass_form_is_the_exact_rotation_with_its_gradients(drift):
    """Well-conditioned rows take `rotate`'s one-pass form: the same function as `rotate_exact` (values and every
    gradient, in fp64), whatever u's own drift off the sphere, and ||u'||^2 = d to rounding in fp32."""
    from search_spaces.residual_lm.nag_math import rotate_exact

    torch.manual_seed(1)
    u = unit_rms_direction(256, 96, torch.float64) * (1 + drift) + drift
    f = 0.7 * torch.randn(256, 96, dtype=torch.float64) + 0.3 * u
    tan = torch.rand(256, dtype=torch.float64) * 2
    grads = []
    for fn in (rotate, rotate_exact):
        leaves = [x.clone().requires_grad_() for x in (u, f, tan)]
        u_next, ds = fn(*leaves)
        g = torch.randn_like(u_next, generator=torch.Generator().manual_seed(2))
        grads.append((u_next.detach(), ds.detach(), *torch.autograd.grad((u_next * g).sum() + ds.sum(), leaves)))
    for fast, exact in zip(*grads, strict=True):
        torch.testing.assert_close(fast, exact, rtol=1e-10, atol=1e-10)
    assert norm_drift(rotate(u.float(), f.float(), tan.float())[0]) < NORM_TOL


@pytest.mark.parametrize("tan", [1.0, 30.0])
def test_the_one_pass_form_holds_the_norm_to_rounding_at_its_switch(tan, monkeypatch):
    """Rows just inside the one-pass form's condition (||f_perp||^2 a hair above WELL_CONDITIONED ||f||^2, d 768,
    fp32) take it, not `rotate_exact`, and still keep ||u'||^2 = d to a few ulps: where the row sums' cancellation
    would cost more, the condition sends the rows to the exact path."""
    from search_spaces.residual_lm import nag_math

    def no_fallback(*args):
        raise AssertionError("the well-conditioned rows fell back to rotate_exact")

    monkeypatch.setattr(nag_math, "rotate_exact", no_fallback)
    torch.manual_seed(3)
    u = unit_rms_direction(512, 768)
    share = nag_math.WELL_CONDITIONED * 1.02  # of ||f||^2 orthogonal to u
    f = (5 * (math.sqrt(1 - share) * u.double() + math.sqrt(share) * orthogonal_part(u))).float()
    assert norm_drift(rotate(u, f, torch.full((512,), tan))[0]) < 1e-6  # fp32 rounding of u' itself: ~3e-7
