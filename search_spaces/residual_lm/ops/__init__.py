"""`ops`: fused kernels for the residual families, each with a PyTorch reference.

Every op is a function with the same contract on both paths:

    <op>(...)            dispatches: the Triton kernel on CUDA tensors, the reference elsewhere
    <op>_reference(...)  plain PyTorch, differentiable by autograd: the ground truth

The Triton path is a `torch.autograd.Function` with a Triton forward and a Triton backward.
`backend(...)` picks the path for a set of tensors; `use_backend("triton" | "reference")`
overrides it in a `with` block (tests run the Triton path on CPU under `TRITON_INTERPRET=1`),
and so does the environment variable `RESNAS_KERNELS` (`auto`, `triton` or `reference`).

`TRITON_INTERPRET` is read when a kernel is decorated, i.e. when its module is imported: set it
before importing this package (tests/conftest.py does so on machines without CUDA).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator

import torch

BACKENDS = ("auto", "triton", "reference")
_override: str | None = None

TRITON_AVAILABLE = importlib.util.find_spec("triton") is not None

if TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    jit = triton.jit
else:  # Triton is a Linux-only dependency: elsewhere the kernels stay plain, never-called functions
    triton = tl = None

    def jit(fn):
        return fn


def interpreting() -> bool:
    """True when Triton kernels run in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def _requested() -> str:
    choice = _override or os.environ.get("RESNAS_KERNELS", "auto").lower()
    if choice not in BACKENDS:
        raise ValueError(f"RESNAS_KERNELS must be one of {', '.join(BACKENDS)}, got {choice!r}")
    return choice


def backend(*tensors: torch.Tensor) -> str:
    """ "triton" or "reference" for an op on these tensors.

    auto: Triton when it is installed and every tensor is on CUDA. triton: always (on CPU this
    needs TRITON_INTERPRET=1). reference: always PyTorch.
    """
    choice = _requested()
    if choice == "auto":
        on_cuda = all(t.is_cuda for t in tensors)
        return "triton" if TRITON_AVAILABLE and on_cuda else "reference"
    if choice == "triton" and not TRITON_AVAILABLE:
        raise RuntimeError("the triton backend needs the triton package (Linux only); use auto or reference")
    return choice


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Force every op inside the block onto one path ("auto", "triton" or "reference")."""
    global _override
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    previous, _override = _override, name
    try:
        yield
    finally:
        _override = previous
