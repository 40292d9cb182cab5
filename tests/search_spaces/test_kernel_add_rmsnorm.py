"""add_rmsnorm: the reference is a residual add then torch's nn.RMSNorm; the Triton kernels match it.

Without CUDA the kernels run in Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1),
so shapes stay small. One test compiles them for sm_90 with Triton's own ptxas (no GPU needed).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from kernel_helpers import (
    DEVICE,
    assert_matches,
    autograd_node_names,
    compile_for_sm90,
    needs_nvidia_backend,
    needs_triton,
)
from search_spaces.residual_lm.ops import use_backend
from search_spaces.residual_lm.ops.add_rmsnorm import (
    add_rmsnorm,
    add_rmsnorm_bytes,
    add_rmsnorm_reference,
)

EPS = 1e-6


def inputs(lead: tuple[int, ...], d: int, dtype: torch.dtype, with_delta: bool = True, device: str = DEVICE):
    x = torch.randn(*lead, d, dtype=dtype, device=device, requires_grad=True)
    delta = torch.randn(*lead, d, dtype=dtype, device=device, requires_grad=True) if with_delta else None
    weight = (1 + 0.3 * torch.randn(d, device=device)).to(dtype).requires_grad_(True)
    return x, delta, weight


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_reference_is_add_then_nn_rmsnorm(dtype):
    x, delta, weight = inputs((2, 5), 48, dtype, device="cpu")
    norm = nn.RMSNorm(48, eps=EPS, dtype=dtype)
    with torch.no_grad():
        norm.weight.copy_(weight)
    z, h = add_rmsnorm_reference(x, delta, weight, EPS)
    assert torch.equal(z, x + delta)
    torch.testing.assert_close(h, norm(x + delta), rtol=1e-6 if dtype == torch.float32 else 1e-12, atol=1e-6)


def test_reference_bf16_is_nn_rmsnorm_up_to_rounding():
    x, delta, weight = inputs((7,), 48, torch.bfloat16, device="cpu")
    norm = nn.RMSNorm(48, eps=EPS, dtype=torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(weight)
    z, h = add_rmsnorm_reference(x, delta, weight, EPS)
    assert h.dtype == torch.bfloat16
    torch.testing.assert_close(h.float(), norm(z).float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("with_delta", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_without_gradients_the_cpu_path_gives_the_eager_functions_values_bit_for_bit(with_delta, dtype):
    """Inference skips the autograd Function (`add_rmsnorm_reference` itself): the same values as with it."""
    x, delta, weight = inputs((3, 5), 48, dtype, with_delta, device="cpu")
    with use_backend("reference"):
        trained = add_rmsnorm(x, delta, weight, EPS)
        assert trained[1].grad_fn is not None and "AddRMSNormEager" in trained[1].grad_fn.name()
        with torch.no_grad():
            inferred = add_rmsnorm(x, delta, weight, EPS)
    assert inferred[1].grad_fn is None and all(torch.equal(a, b) for a, b in zip(inferred, trained, strict=True))


@pytest.mark.parametrize("with_delta", [True, False])
def test_reference_gradcheck(with_delta):
    x, delta, weight = inputs((3,), 6, torch.float64, with_delta, device="cpu")
    args = (x, weight) if delta is None else (x, delta, weight)

    def fn(*a):
        return add_rmsnorm_reference(a[0], None if delta is None else a[1], a[-1], EPS)

    assert torch.autograd.gradcheck(fn, args)


CASES = {  # lead dims, d, with delta
    "d48-multi-block": ((37,), 48, True),  # 3 blocks of 16 rows over 2 looping backward programs
    "d64-3d": ((2, 8), 64, True),
    "one-row": ((1,), 48, True),
    "d1": ((5,), 1, True),
    "no-delta": ((37,), 48, False),
}
BF16_ULP = 2.0**-7  # spacing of bf16 values in [1, 2)


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_triton_matches_reference(case, dtype):
    lead, d, with_delta = CASES[case]
    x, delta, weight = inputs(lead, d, dtype, with_delta)
    args = [t for t in (x, delta, weight) if t is not None]
    grad_z, grad_h = torch.randn_like(x), torch.randn_like(x)
    results = {}
    for path in ("triton", "reference"):
        with use_backend(path):
            z, h = add_rmsnorm(x, delta, weight, EPS)
        results[path] = (z, h, *torch.autograd.grad((z, h), args, (grad_z, grad_h)))
    assert "_AddRMSNormBackward" in autograd_node_names(results["triton"][1])
    (z, h, *grads), (z_ref, h_ref, *grads_ref) = results["triton"], results["reference"]
    assert z.dtype == h.dtype == dtype and h.shape == x.shape
    if dtype == torch.float32:
        assert torch.equal(z, z_ref)  # the same fp32 add on both paths
    else:  # one fp32 add rounded once on both paths; at most one ulp apart (see assert_matches)
        torch.testing.assert_close(z.float(), z_ref.float(), rtol=BF16_ULP, atol=0.0)
    assert_matches(h, h_ref)
    for grad, grad_ref in zip(grads, grads_ref, strict=False):
        assert_matches(grad, grad_ref)


@needs_triton
def test_triton_mixed_dtypes_follow_torch_promotion():
    """An fp32 residual stream plus a bf16 sublayer output (autocast): z and h in fp32."""
    x, _, weight = inputs((9,), 48, torch.float32)
    delta = torch.randn(9, 48, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    grad_z, grad_h = torch.randn_like(x), torch.randn_like(x)
    results = {}
    for path in ("triton", "reference"):
        with use_backend(path):
            z, h = add_rmsnorm(x, delta, weight, EPS)
        results[path] = (z, h, *torch.autograd.grad((z, h), (x, delta, weight), (grad_z, grad_h)))
    for actual, expected in zip(results["triton"], results["reference"], strict=False):
        assert_matches(actual, expected)
    assert [t.dtype for t in results["triton"]] == [torch.float32] * 3 + [torch.bfloat16, torch.float32]


@needs_triton
def test_triton_backward_when_only_h_is_used():
    x, delta, weight = inputs((9,), 48, torch.float32)
    grad_h = torch.randn_like(x)
    grads = {}
    for path in ("triton", "reference"):
        with use_backend(path):
            _, h = add_rmsnorm(x, delta, weight, EPS)
        grads[path] = torch.autograd.grad(h, (x, delta, weight), grad_h)
    for grad, grad_ref in zip(grads["triton"], grads["reference"], strict=False):
        assert_matches(grad, grad_ref)
    assert torch.equal(grads["triton"][0], grads["triton"][1])  # dx = ddelta


def test_auto_picks_reference_for_cpu_tensors():
    x, delta, weight = inputs((4,), 16, torch.float32, device="cpu")
    with use_backend("auto"):
        z, h = add_rmsnorm(x, delta, weight)
    assert "_AddRMSNormBackward" not in autograd_node_names(h)
    z_ref, h_ref = add_rmsnorm_reference(x, delta, weight)
    assert torch.equal(h, h_ref) and torch.equal(z, z_ref)


def test_bad_shapes_raise():
    x, delta, weight = inputs((4,), 16, torch.float32, device="cpu")
    with pytest.raises(ValueError, match="weight"):
        add_rmsnorm(x, delta, weight[:8])
    with pytest.raises(ValueError, match="delta"):
        add_rmsnorm(x, delta[:2], weight)


def test_minimum_forward_bytes():
    # bf16: read x, delta, w; write z, h.
    assert add_rmsnorm_bytes(10, 48, torch.bfloat16, True) == 2 * (4 * 10 * 48 + 48)
    assert add_rmsnorm_bytes(10, 48, torch.float32, False) == 4 * (2 * 10 * 48 + 48)


COMPILE_FOR_SM90 = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from search_spaces.residual_lm.ops import add_rmsnorm as op

cfg = op._launch(768)
warps = cfg.pop("num_warps")
rows = {name: "*bf16" for name in ("z_ptr", "w_ptr", "gh_ptr", "gz_ptr", "gx_ptr")}
kernels = {
    "forward": (op._forward_kernel, {**{n: "*bf16" for n in ("x_ptr", "delta_ptr", "w_ptr", "z_ptr", "h_ptr")},
                                     "N": "i32", "d": "i32", "eps": "fp32"}, "HAS_DELTA"),
    "backward": (op._backward_kernel, {**rows, "partial_w_ptr": "*fp32", "N": "i32", "d": "i32", "eps": "fp32"},
                 "HAS_DZ"),
}
for name, (fn, signature, flag) in kernels.items():
    consts = {flag: True, **cfg}
    signature = {**signature, **{k: "constexpr" for k in consts}}
    aligned = {(i,): [["tt.divisibility", 16]] for i, k in enumerate(signature) if k.endswith("_ptr") or k == "d"}
    kernel = triton.compile(ASTSource(fn, signature, consts, aligned), target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": warps})
    print(name, "cubin" in kernel.asm, kernel.asm["ptx"].count("ld.global.v"), kernel.asm["ptx"].count("ld.global"))
"""


@needs_nvidia_backend
def test_kernels_compile_for_sm90_with_vector_loads(tmp_path):
    """The interpreter skips the compiler: build real sm_90 code (no GPU needed) and read its PTX."""
    stdout = compile_for_sm90(COMPILE_FOR_SM90, tmp_path)
    for line in stdout.split("\n")[:2]:
        name, has_cubin, vector_loads, loads = line.split()
        assert has_cubin == "True", name
        assert int(vector_loads) == int(loads) > 0, f"{name}: {vector_loads} of {loads} global loads are vectorised"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("with_delta", [True, False])
@pytest.mark.parametrize("use", ["both", "h_only", "z_only"])
def test_the_eager_path_equals_autograd_through_the_reference(dtype, with_delta, use):
    """The reference backend's written-out backward: identical forward values, the same gradients as
    autograd through `add_rmsnorm_reference`, whichever outputs the loss uses (the previous path)."""
    if use == "z_only" and not with_delta:
        pytest.skip("without delta, z is x itself")
    x, delta, weight = inputs((3, 5), 40, dtype, with_delta, device="cpu")
    ref_inputs = [t.detach().clone().requires_grad_(True) if t is not None else None for t in (x, delta, weight)]
    with use_backend("reference"):
        z, h = add_rmsnorm(x, delta, weight, EPS)
    z_ref, h_ref = add_rmsnorm_reference(*ref_inputs, EPS)
    assert torch.equal(z, z_ref) and torch.equal(h, h_ref) and h.dtype == h_ref.dtype
    gen = torch.Generator().manual_seed(1)
    gz, gh = (torch.randn(z.shape, generator=gen).to(dtype) for _ in range(2))

    def loss(z, h):
        return {"both": (z * gz).sum() + (h * gh).sum(), "h_only": (h * gh).sum(), "z_only": (z * gz).sum()}[use]

    loss(z, h).backward()
    loss(z_ref, h_ref).backward()
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-6)
    for mine, theirs in zip((x, delta, weight), ref_inputs, strict=True):
        if mine is None:
            continue
        if theirs.grad is None:
            assert mine.grad is None or not mine.grad.any()
            continue
        assert mine.grad.dtype == theirs.grad.dtype
        torch.testing.assert_close(mine.grad, theirs.grad, **tol)


@pytest.mark.parametrize("family", ["cascaded", "ancre"])
def test_models_train_as_on_the_previous_path(family, monkeypatch):
    """A whole model's loss is identical and its gradients equal to autograd through the reference."""
    from helpers import small_cfg, tokens
    from search_spaces.residual_lm import build_model
    from search_spaces.residual_lm.ops import add_rmsnorm as module

    cfg = small_cfg(residual=family, mod_rate=0.25)
    idx = tokens(cfg)

    def loss_and_grads(model):
        with use_backend("reference"):
            loss = model(idx).logsumexp(-1).mean()
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    torch.manual_seed(0)
    model = build_model(cfg)
    previous = build_model(cfg)
    previous.load_state_dict(model.state_dict())
    loss, grads = loss_and_grads(model)

    def through_reference(x, delta, weight, eps):
        z, h = add_rmsnorm_reference(x, delta, weight, eps)
        return h if delta is None else (z, h)

    monkeypatch.setattr(module._AddRMSNormEager, "apply", through_reference)
    previous_loss, previous_grads = loss_and_grads(previous)
    assert torch.equal(loss, previous_loss) and grads.keys() == previous_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, previous_grads[name], rtol=1e-4, atol=1e-6, msg=name)
