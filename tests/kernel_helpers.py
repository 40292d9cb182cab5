"""What the fused-kernel tests share: the device, the Triton skip mark, graph inspection, sm_90 builds."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from search_spaces.residual_lm.ops import TRITON_AVAILABLE, interpreting

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
needs_triton = pytest.mark.skipif(
    not (TRITON_AVAILABLE and (torch.cuda.is_available() or interpreting())),
    reason="the Triton path needs CUDA or TRITON_INTERPRET=1",
)
needs_nvidia_backend = pytest.mark.skipif(
    not TRITON_AVAILABLE or importlib.util.find_spec("triton.backends.nvidia") is None,
    reason="needs Triton with its NVIDIA backend",
)
ROOT = Path(__file__).resolve().parents[1]


def autograd_node_names(t: torch.Tensor) -> set[str]:
    """Class names of every node in t's backward graph (each node visited once)."""
    visited, todo = set(), [t.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in visited:
            visited.add(node)
            todo.extend(fn for fn, _ in node.next_functions)
    return {type(node).__name__ for node in visited}


def assert_matches(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """fp32: 1e-5. bf16: 2% of the tensor's largest value, since both paths round their outputs to
    bf16 and Triton's interpreter rounds toward zero (compiled code to nearest even): a value may sit
    one ulp from torch's, and what is computed from it (a norm, sums over rows) a few more."""
    assert actual.dtype == expected.dtype
    if expected.dtype == torch.float32:
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    else:
        scale = expected.float().abs().max().item()
        torch.testing.assert_close(actual.float(), expected.float(), rtol=2e-2, atol=2e-2 * scale)


def compile_for_sm90(script: str, cache_dir: Path) -> str:
    """Run `script` (which calls triton.compile for an sm_90 target) with the interpreter off; its stdout.

    The interpreter never runs Triton's compiler, so this is the only check that the kernels build
    for a GPU; Triton ships its own ptxas, so no GPU is needed.
    """
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(cache_dir), TRITON_DEFAULT_FP_FUSION="1")
    run = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout
