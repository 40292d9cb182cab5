"""The fused ops the families call, one name each, from `ops`: the Triton kernel on CUDA, the PyTorch
reference elsewhere (`ops.backend`). The exported Hugging Face model ships a `fused.py` that binds the
same names to `reference_ops` instead (`workers.release.convert`), so the families' code travels unchanged."""

from .ops.add_rmsnorm import add_rmsnorm
from .ops.ancre_mix import ancre_mix, ancre_mixes
from .ops.nag_epilogue import nag_epilogue

__all__ = ["add_rmsnorm", "ancre_mix", "ancre_mixes", "nag_epilogue"]
