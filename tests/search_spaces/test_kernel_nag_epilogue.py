"""The fused NAG epilogue: reference == NagGate + rotate, reference gradients by gradcheck, and
the Triton kernels (TRITON_INTERPRET=1 on CPU) == the reference, forward and all 7 gradients."""

import math

import pytest
import torch
import torch.nn.functional as F

from kernel_helpers import DEVICE, autograd_node_names, compile_for_sm90, needs_nvidia_backend, needs_triton
from search_spaces.residual_lm import nag
from search_spaces.residual_lm.ops import backend, use_backend
from search_spaces.residual_lm.ops.nag_epilogue import (
    nag_epilogue,
    nag_epilogue_bytes,
    nag_epilogue_reference,
)


def unit_rms_direction(n: int, d: int) -> torch.Tensor:
    """Rows zero-mean with ||u||^2 = d; for d = 1 (where none exists) rows of +-1."""
    if d == 1:
        return torch.where(torch.rand(n, 1) < 0.5, -1.0, 1.0)
    u = torch.randn(n, d)
    u = u - u.mean(-1, keepdim=True)
    return u * (math.sqrt(d) / u.norm(dim=-1, keepdim=True))


def epilogue_inputs(n: int, d: int, c: int, dtype=torch.float32, param_dtype=torch.float32):
    """(u, f, s, pre, mix_weights, beta, alpha), leaves requiring grad."""
    rows = [unit_rms_direction(n, d), torch.randn(n, d), torch.randn(n), 2 * torch.randn(n, c)]
    params = [
        torch.softmax(torch.randn(c), 0),
        F.softplus(torch.randn(())),
        torch.rand(()) + 0.2,
    ]
    rows = [x.to(DEVICE, dtype) for x in rows]
    params = [x.to(DEVICE, param_dtype) for x in params]
    return [x.requires_grad_() for x in rows + params]


def outputs_and_grads(fn, inputs, upstream):
    """(u', s') and the gradients of <u', g_u> + <s', g_s> for all 7 inputs."""
    u_next, s_next = fn(*inputs)
    loss = (u_next.float() * upstream[0]).sum() + (s_next.float() * upstream[1]).sum()
    return [u_next, s_next, *torch.autograd.grad(loss, inputs)]


def assert_close_scaled(actual: torch.Tensor, expected: torch.Tensor, rel: float, name: str):
    """max |actual - expected| <= rel * max(max |expected|, 1): relative to the tensor's scale."""
    actual, expected = actual.detach().float(), expected.detach().float()
    assert actual.shape == expected.shape, name
    err = (actual - expected).abs().max().item() if expected.numel() else 0.0
    bound = rel * max(expected.abs().max().item() if expected.numel() else 0.0, 1.0)
    assert err <= bound, f"{name}: max error {err:.3g} > {bound:.3g}"


KERNEL_NODE = "_NagEpilogueBackward"  # torch names a Function's node <class name>Backward
NAMES = ["u_next", "s_next", "grad_u", "grad_f", "grad_s", "grad_pre", "grad_mix_weights", "grad_beta", "grad_alpha"]


def test_reference_equals_the_definition_with_f_perp_and_v_materialised():
    """NagGate's m from its own parameters, then u' = cos(theta) u + sin(theta) v built explicitly."""
    d, c = 48, 3
    gate = nag.NagGate(d, c)
    with torch.no_grad():
        gate.mix_logits.normal_()
        gate.beta_raw.normal_()
    u = unit_rms_direction(10, d).view(2, 5, d)
    f, s, alpha = torch.randn(2, 5, d), torch.randn(2, 5), torch.tensor(0.7)
    with torch.no_grad():
        pre = u @ gate.pre.weight.T + gate.pre.bias
        m = ((torch.sigmoid(pre) * torch.softmax(gate.mix_logits, 0)).sum(-1)) ** F.softplus(gate.beta_raw)
        theta = torch.atan(alpha * m).unsqueeze(-1)
        f_centred = f - f.mean(-1, keepdim=True)
        f_perp = f_centred - (f_centred * u).sum(-1, keepdim=True) / d * u
        v = math.sqrt(d) * f_perp / f_perp.norm(dim=-1, keepdim=True)
        expected_u = torch.cos(theta) * u + torch.sin(theta) * v
        expected_s = s + torch.log(1 / torch.cos(theta.squeeze(-1)))  # log ||x'|| / ||x|| = log sec(theta)
        mix_weights, beta = gate.shape_params()
        actual_u, actual_s = nag_epilogue_reference(u, f, s, gate.pre(u), mix_weights, beta, alpha)
        torch.testing.assert_close(gate(u), m, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(actual_u, expected_u, rtol=0, atol=1e-5)
    torch.testing.assert_close(actual_s, expected_s, rtol=0, atol=1e-6)


def test_reference_gradcheck_float64():
    u, f, s, pre, w, beta, alpha = (x.detach().double() for x in epilogue_inputs(4, 6, 3))
    inputs = [x.requires_grad_() for x in (u, f, s, pre, w, beta, alpha)]
    assert torch.autograd.gradcheck(nag_epilogue_reference, inputs, eps=1e-6, atol=1e-7)


CASES = [  # (rows, d, C): not a power of two, a power of two, one row, d = 1, several programs
    pytest.param(16, 48, 5, id="d48-C5"),
    pytest.param(16, 64, 1, id="d64-C1"),
    pytest.param(1, 48, 3, id="one-row"),
    pytest.param(8, 1, 2, id="d1"),
    pytest.param(37, 96, 8, id="two-programs"),
]


@needs_triton
@pytest.mark.parametrize("n, d, c", CASES)
def test_triton_matches_reference_fp32(n, d, c):
    inputs = epilogue_inputs(n, d, c)
    upstream = (torch.randn(n, d, device=DEVICE), torch.randn(n, device=DEVICE))
    expected = outputs_and_grads(nag_epilogue_reference, inputs, upstream)
    with use_backend("triton"):
        actual = outputs_and_grads(nag_epilogue, inputs, upstream)
    assert KERNEL_NODE in autograd_node_names(actual[0])
    for name, a, e in zip(NAMES, actual, expected, strict=False):
        assert a.dtype == e.dtype, name
        assert torch.isfinite(a).all(), name
        assert_close_scaled(a, e, 1e-5, name)


@needs_triton
@pytest.mark.parametrize("n, d, c", CASES[:4])
def test_triton_matches_reference_bf16(n, d, c):
    """bf16 rows (fp32 parameters, as under autocast) against the reference on the same values
    in fp32: outputs and row gradients within bf16 rounding, parameter gradients (summed in fp32
    from fp32 internals) tight."""
    inputs = epilogue_inputs(n, d, c, dtype=torch.bfloat16)
    exact = [x.detach().float().requires_grad_() for x in inputs]
    upstream = (torch.randn(n, d, device=DEVICE), torch.randn(n, device=DEVICE))
    upstream = tuple(g.bfloat16().float() for g in upstream)  # what bf16 outputs would receive
    expected = outputs_and_grads(nag_epilogue_reference, exact, upstream)
    with use_backend("triton"):
        actual = outputs_and_grads(nag_epilogue, inputs, upstream)
    for name, a, e, x in zip(NAMES, actual, expected, [inputs[0], inputs[2], *inputs], strict=False):
        assert a.dtype == x.dtype, name
        assert_close_scaled(a, e, 1e-2 if x.dtype == torch.bfloat16 else 1e-5, name)


@needs_triton
def test_triton_small_rotation_log_norm_step():
    """tan ~ 1e-3: s' - s = log1p(tan^2) / 2 ~ 5e-7 must keep its relative precision (an fp32
    log(1 + tan^2) would be off by ~10%)."""
    u, f, s, pre, w, beta, _ = (x.detach() for x in epilogue_inputs(16, 48, 3))
    inputs = [u, f, torch.zeros_like(s), pre, w, beta, torch.tensor(1e-3, device=DEVICE)]
    expected = nag_epilogue_reference(*inputs)[1]
    with use_backend("triton"):
        actual = nag_epilogue(*inputs)[1]
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=0)


@needs_triton
def test_triton_non_contiguous_inputs():
    """Strided f and column-major pre, forward and backward (gradients reach the base tensors)."""
    u, _, s, _, w, beta, alpha = epilogue_inputs(12, 48, 4)
    f_base = torch.randn(48, 24, device=DEVICE, requires_grad=True)
    pre_base = torch.randn(4, 12, device=DEVICE, requires_grad=True)
    leaves = [u, f_base, s, pre_base, w, beta, alpha]
    upstream = (torch.randn(12, 48, device=DEVICE), torch.randn(12, device=DEVICE))

    def on_views(fn):
        outputs = fn(u, f_base.t()[::2], s, pre_base.t(), w, beta, alpha)  # (12, 48), (12, 4)
        loss = (outputs[0] * upstream[0]).sum() + (outputs[1] * upstream[1]).sum()
        return [*outputs, *torch.autograd.grad(loss, leaves)]

    expected = on_views(nag_epilogue_reference)
    with use_backend("triton"):
        actual = on_views(nag_epilogue)
    for name, a, e in zip(NAMES, actual, expected, strict=False):
        assert_close_scaled(a, e, 1e-5, name)


@needs_triton
def test_triton_keeps_leading_dims():
    u, f, s, pre, *params = epilogue_inputs(6, 40, 2)
    inputs = [u.view(2, 3, 40), f.view(2, 3, 40), s.view(2, 3), pre.view(2, 3, 2), *params]
    with use_backend("triton"):
        u_next, s_next = nag_epilogue(*inputs)
    assert u_next.shape == (2, 3, 40) and s_next.shape == (2, 3)
    assert_close_scaled(u_next, nag_epilogue_reference(*inputs)[0], 1e-5, "u_next")


def test_auto_picks_reference_on_cpu(monkeypatch):
    monkeypatch.delenv("RESNAS_KERNELS", raising=False)
    inputs = [x.cpu() for x in epilogue_inputs(5, 48, 3)]
    assert backend(*inputs[:4]) == "reference"
    u_next, s_next = nag_epilogue(*inputs)
    assert KERNEL_NODE not in autograd_node_names(u_next)
    expected = nag_epilogue_reference(*inputs)
    assert torch.equal(u_next, expected[0]) and torch.equal(s_next, expected[1])


@pytest.mark.parametrize(
    "index, shape, field",
    [(1, (5, 47), "f"), (2, (6,), "s"), (3, (4, 3), "pre"), (4, (4,), "mix_weights"), (6, (2,), "alpha")],
)
def test_bad_shapes_name_the_field(index, shape, field):
    inputs = epilogue_inputs(5, 48, 3)
    inputs[index] = torch.randn(shape, device=DEVICE)
    with pytest.raises(ValueError, match=rf"^{field} must"):
        nag_epilogue(*inputs)


def test_bytes_count_the_forward_tensors():
    u, f, s, pre, *_ = epilogue_inputs(7, 48, 5, dtype=torch.bfloat16)
    u_next, s_next = torch.empty_like(u), torch.empty_like(s)
    moved = sum(t.nbytes for t in (u, f, s, pre, u_next, s_next))
    assert nag_epilogue_bytes(7, 48, 5, torch.bfloat16) == moved


COMPILE_FOR_SM90 = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from search_spaces.residual_lm.ops import nag_epilogue as op

cfg = op._launch(8192, 768, 32)
warps = cfg.pop("num_warps")
shared = {"u_ptr": "*fp32", "f_ptr": "*bf16", "pre_ptr": "*bf16", "w_ptr": "*fp32", "beta_ptr": "*fp32",
          "alpha_ptr": "*fp32"}  # as under autocast: u fp32, the sublayer's output and the gate's matmul bf16
sizes = {"N": "i32", "d": "i32", "C": "i32", "sqrt_d": "fp32"}
kernels = {
    "forward": (op._forward_kernel, {**shared, "s_ptr": "*fp32", "u_out_ptr": "*fp32", "s_out_ptr": "*fp32"}),
    "backward": (op._backward_kernel, {**shared, "gu_next_ptr": "*fp32", "gs_next_ptr": "*fp32", "gu_ptr": "*fp32",
                                       "gf_ptr": "*bf16", "gpre_ptr": "*bf16", "part_w_ptr": "*fp32",
                                       "part_beta_ptr": "*fp32", "part_alpha_ptr": "*fp32"}),
}
for name, (fn, pointers) in kernels.items():
    names = fn.arg_names
    given = {**pointers, **sizes}
    consts = {"EPS": op.NORM_EPS, "TOL": op.PARALLEL_TOL, **cfg}
    signature = {k: given[k] if k in given else "constexpr" for k in names}
    aligned = {(i,): [["tt.divisibility", 16]] for i, k in enumerate(names) if k.endswith("_ptr") or k == "d"}
    kernel = triton.compile(ASTSource(fn, signature, consts, aligned), target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": warps})
    print(name, "cubin" in kernel.asm, kernel.asm["ptx"].count("ld.global.v"))
"""


@needs_nvidia_backend
def test_kernels_compile_for_sm90(tmp_path):
    """The interpreter never runs Triton's compiler: build real sm_90 code at d = 768 (no GPU needed)."""
    lines = dict(line.split(maxsplit=1) for line in compile_for_sm90(COMPILE_FOR_SM90, tmp_path).strip().split("\n"))
    for name in ("forward", "backward"):
        has_cubin, vector_loads = lines[name].split()
        assert has_cubin == "True" and int(vector_loads) > 0, (name, lines[name])
