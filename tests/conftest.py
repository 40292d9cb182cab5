"""Every test starts from the same global RNG state.

Without CUDA, Triton kernels can only run in Triton's CPU interpreter, and `TRITON_INTERPRET` is
read when a kernel is decorated (module import): set it here, before any test imports them. It
changes nothing for the default (reference) path on CPU tensors.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
