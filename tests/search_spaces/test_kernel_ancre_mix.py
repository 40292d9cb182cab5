"""ancre_mix: the reference equals the stacked einsum; the Triton kernels match it without stacking. ancre_mixes:
every block's mix as the states arrive, the reference's running sums equal to mixing each block alone.

Without CUDA the kernels run in Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1),
so shapes stay small. One test compiles them for sm_90 with Triton's own ptxas (no GPU needed).
"""

from __future__ import annotations

import pytest
import torch

from kernel_helpers import (
    DEVICE,
    assert_matches,
    autograd_node_names,
    compile_for_sm90,
    needs_nvidia_backend,
    needs_triton,
)
from search_spaces.residual_lm.ops import ancre_mix as ancre_mix_module
from search_spaces.residual_lm.ops import use_backend
from search_spaces.residual_lm.ops.ancre_mix import (
    AncreMixesReference,
    ancre_mix,
    ancre_mix_bytes,
    ancre_mix_reference,
    ancre_mixes,
)

TAU = 0.5


def stacked_sum(p, states):
    """sum_i p_i states_i the obvious way (materialises the (j, ...) stack): the ground truth."""
    return torch.einsum("j,j...->...", p.to(states[0].dtype), torch.stack(states))


def inputs(j: int, shape: tuple[int, ...], dtype: torch.dtype, device: str = DEVICE):
    """Logits c (j,) in fp32 (as the model's parameter) and j states of one shape and dtype."""
    logits = torch.randn(j, device=device, requires_grad=True)
    states = [torch.randn(*shape, dtype=dtype, device=device, requires_grad=True) for _ in range(j)]
    return logits, states


@pytest.mark.parametrize("j", [1, 3, 25])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_reference_is_the_stacked_sum(j, dtype):
    logits, states = inputs(j, (2, 5, 48), dtype, device="cpu")
    p = torch.softmax(logits.to(dtype) / TAU, 0)
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(ancre_mix_reference(p, states), stacked_sum(p, states), rtol=tol, atol=tol)


def test_reference_gradcheck():
    p = torch.rand(3, dtype=torch.float64, requires_grad=True)
    states = [torch.randn(2, 5, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    assert torch.autograd.gradcheck(lambda p, *s: ancre_mix_reference(p, s), (p, *states))


CASES = {  # j, state shape
    "j1": (1, (5, 48)),
    "j3-d64-3d": (3, (2, 3, 64)),
    "j11": (11, (5, 48)),
    "j25-d48": (25, (7, 48)),  # a 24-layer model's last block
    "one-row": (3, (1, 48)),
    "d1": (3, (5, 1)),
}


def forward_backward(path: str, logits: torch.Tensor, states: list[torch.Tensor], grad_out: torch.Tensor):
    """out, then the gradients of <out, grad_out> for the logits (through softmax) and every state."""
    with use_backend(path):
        out = ancre_mix(torch.softmax(logits / TAU, 0), states)
    return out, torch.autograd.grad(out, [logits, *states], grad_out)


def triton_matching_reference(logits, states, grad_out):
    """The Triton path's out and gradients, after checking each against the reference path's."""
    out, grads = forward_backward("triton", logits, states, grad_out)
    out_ref, grads_ref = forward_backward("reference", logits, states, grad_out)
    assert_matches(out, out_ref)
    for grad, grad_ref in zip(grads, grads_ref, strict=False):
        assert_matches(grad, grad_ref)
    return out, grads


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_triton_matches_reference(case, dtype):
    j, shape = CASES[case]
    logits, states = inputs(j, shape, dtype)
    grad_out = torch.randn(shape, dtype=dtype, device=DEVICE)
    out, grads = triton_matching_reference(logits, states, grad_out)
    assert "_AncreMixBackward" in autograd_node_names(out)
    assert out.dtype == dtype and out.shape == states[0].shape
    assert grads[0].dtype == torch.float32  # the logits' gradient, through torch's softmax


@needs_triton
def test_triton_mixed_dtypes_follow_torch_promotion():
    """An fp32 embedding o_0 mixed with bf16 block outputs (autocast): out in fp32."""
    logits, states = inputs(3, (5, 48), torch.bfloat16)
    states[0] = torch.randn(5, 48, device=DEVICE, requires_grad=True)
    grad_out = torch.randn(5, 48, device=DEVICE)
    out, grads = triton_matching_reference(logits, states, grad_out)
    assert [g.dtype for g in (out, *grads)] == [torch.float32] * 3 + [torch.bfloat16] * 2


@needs_triton
def test_triton_groups_states_over_launches(monkeypatch):
    """More states than one launch takes: later launches add onto out, the backward runs per group."""
    monkeypatch.setattr(ancre_mix_module, "_MAX_STATES_PER_LAUNCH", 4)  # j = 11: groups of 4, 4, 3
    logits, states = inputs(11, (5, 48), torch.float32)
    grad_out = torch.randn(5, 48, device=DEVICE)
    out, grads = triton_matching_reference(logits, states, grad_out)


@needs_triton
def test_triton_never_stacks_the_states(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the Triton path copied the states into one tensor")

    logits, states = inputs(5, (4, 48), torch.float32)
    grad_out = torch.randn(4, 48, device=DEVICE)
    p = torch.softmax(logits / TAU, 0)
    for name in ("stack", "cat", "vstack", "hstack"):
        monkeypatch.setattr(torch, name, refuse)
    with use_backend("triton"):
        out = ancre_mix(p, states)
    grads = torch.autograd.grad(out, states, grad_out)
    monkeypatch.undo()
    torch.testing.assert_close(out, stacked_sum(p.detach(), states), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grads[2], p[2].detach() * grad_out)


def test_auto_picks_reference_for_cpu_tensors():
    logits, states = inputs(3, (4, 16), torch.float32, device="cpu")
    p = torch.softmax(logits, 0)
    with use_backend("auto"):
        out = ancre_mix(p, states)
    assert "_AncreMixBackward" not in autograd_node_names(out)
    assert torch.equal(out, ancre_mix_reference(p, states))


def test_bad_inputs_raise():
    p = torch.rand(3)
    with pytest.raises(ValueError, match="p must have shape"):
        ancre_mix(p, [torch.randn(4, 8)] * 2)
    with pytest.raises(ValueError, match=r"states\[1\]"):
        ancre_mix(p, [torch.randn(4, 8), torch.randn(4, 9), torch.randn(4, 8)])  # shapes differ
    with pytest.raises(ValueError, match="at least one"):
        ancre_mix(p[:0], [])


def every_mix(p: torch.Tensor, states: list[torch.Tensor], mixes) -> list[torch.Tensor]:
    """Block j's mix from `mixes` (an ancre_mixes) for j = 1..L, adding the states as a model's forward does."""
    out = []
    for state in states[1:]:
        out.append(mixes.next())
        mixes.add(state)
    return out


def block_by_block(p: torch.Tensor, states: list[torch.Tensor]) -> list[torch.Tensor]:
    return [ancre_mix_reference(p[:j, j - 1], states[:j]) for j in range(1, p.shape[0] + 1)]


def ingoing(n: int, dtype=torch.float32) -> torch.Tensor:
    """Random p (L, L) with p[i, j - 1] = p_ij: block j's softmax over i < j, zero where i >= j."""
    c = torch.randn(n, n, dtype=dtype).masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(c / TAU, dim=1).T


@pytest.mark.parametrize("first", [torch.float32, torch.bfloat16], ids=["fp32", "fp32-after-bf16"])
def test_running_sums_are_each_blocks_mix(first):
    """The running sums give every block the mix `ancre_mix_reference` gives it alone, term for term: the same
    numbers (to the bit), dtypes promoted as it promotes them (a bf16 o_0 then fp32 states: bf16, then fp32)."""
    states = [torch.randn(2, 3, 16, dtype=first)] + [torch.randn(2, 3, 16) for _ in range(5)]
    p = ingoing(5)
    for got, expected in zip(
        every_mix(p, states, AncreMixesReference(p, states[0])), block_by_block(p, states), strict=True
    ):
        assert got.dtype == expected.dtype and torch.equal(got, expected)


def test_running_sums_carry_the_gradients_of_each_blocks_mix():
    p = ingoing(4, torch.float64).requires_grad_()
    states = [torch.randn(3, 5, dtype=torch.float64, requires_grad=True) for _ in range(5)]
    weights = [torch.randn(3, 5, dtype=torch.float64) for _ in range(4)]

    def loss(mixes):
        return sum((w * m).sum() for w, m in zip(weights, mixes, strict=True))

    inputs = [p, *states[:-1]]  # the last state feeds no block
    running = torch.autograd.grad(loss(every_mix(p, states, AncreMixesReference(p, states[0]))), inputs)
    alone = torch.autograd.grad(loss(block_by_block(p, states)), inputs)
    for got, expected in zip(running, alone, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@needs_triton
def test_triton_mixes_each_block_with_one_fused_launch():
    p = ingoing(4).to(DEVICE)
    states = [torch.randn(5, 48, device=DEVICE) for _ in range(5)]
    with use_backend("triton"):
        mixes = ancre_mixes(p, states[0])
        fused = every_mix(p, states, mixes)
    assert not isinstance(mixes, AncreMixesReference)
    for got, expected in zip(fused, block_by_block(p.cpu(), [s.cpu() for s in states]), strict=True):
        assert_matches(got.cpu(), expected)
    with pytest.raises(ValueError, match=r"p must be \(L, L\)"):
        ancre_mixes(p[:3], states[0])


def test_minimum_forward_bytes():
    # bf16, j = 25: read 25 states and p (fp32), write out.
    assert ancre_mix_bytes(10, 48, 25, torch.bfloat16) == 2 * 26 * 10 * 48 + 4 * 25


COMPILE_FOR_SM90 = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from search_spaces.residual_lm.ops import ancre_mix as op

j, state = 25, "*bf16"
kernels = {
    "forward": (op._forward_kernel, {"p_ptr": "*fp32", "p_start": "i32", "states": (state,) * j, "out_ptr": state,
                                     "N": "i32", "ACCUMULATE": "constexpr", "BLOCK": "constexpr"},
                {"ACCUMULATE": False, "BLOCK": op._BLOCK}),
    "backward": (op._backward_kernel, {"p_ptr": "*fp32", "p_start": "i32", "g_ptr": state, "states": (state,) * j,
                                       "grads": (state,) * j, "partial_p_ptr": "*fp32", "J": "i32", "N": "i32",
                                       "BLOCK": "constexpr"}, {"BLOCK": op._BLOCK}),
}
for name, (fn, signature, consts) in kernels.items():
    aligned = {}
    for i, (arg, kind) in enumerate(signature.items()):
        if isinstance(kind, tuple):
            aligned.update({(i, k): [["tt.divisibility", 16]] for k in range(len(kind))})
        elif kind.startswith("*") or arg == "N":  # as Triton specialises 16-aligned pointers and sizes
            aligned[(i,)] = [["tt.divisibility", 16]]
    kernel = triton.compile(ASTSource(fn, signature, consts, aligned), target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": op._WARPS})
    ptx = kernel.asm["ptx"]
    print(name, "cubin" in kernel.asm, ptx.count("ld.global.v4"), ptx.count("st.global.v4"))
"""


@needs_nvidia_backend
def test_kernels_compile_for_sm90_with_one_vector_access_per_state(tmp_path):
    """The interpreter skips the compiler: build real sm_90 code for j = 25 bf16 states (no GPU
    needed) and count its 16-byte accesses: one load per state (+ g in the backward), one store
    for out, one per state gradient."""
    stdout = compile_for_sm90(COMPILE_FOR_SM90, tmp_path)
    lines = dict(line.split(maxsplit=1) for line in stdout.strip().split("\n"))
    assert lines["forward"].split() == ["True", "25", "1"]
    assert lines["backward"].split() == ["True", "26", "25"]
