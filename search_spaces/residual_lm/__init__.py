"""`residual_lm`: a LLaMA-style decoder with cascaded, NAG or ANCRe residuals and Mixture-of-Depths.

Two halves: sizing a config (its fields, FLOPs, parameter and KV-cache counts) needs no torch; the models
(`ResidualLM`, `build_model`, `count_parameters`, `FAMILIES`) are imported on first use (`__getattr__`), so that
a process that only sizes configs (`nas effects`, the dashboard) never pays for importing torch.
"""

from typing import TYPE_CHECKING

from .cheapest import cheapest_config
from .config import FLAVOURS, ArchConfig, config_error_message, flavour
from .decode_cost import DecodeCost, decode_cost, decode_flops, kv_cache_bytes
from .flops import (
    TRAINING_FLOPS_PER_FORWARD_FLOP,
    FlopsPerToken,
    flops_per_token,
    forward_flops,
    forward_flops_per_token,
    tokens_for,
    training_flops,
)
from .parameters import parameter_count

if TYPE_CHECKING:
    from .base import ResidualLM
    from .model import FAMILIES, build_model, count_parameters

__all__ = [
    "FAMILIES",
    "TRAINING_FLOPS_PER_FORWARD_FLOP",
    "FLAVOURS",
    "ArchConfig",
    "DecodeCost",
    "FlopsPerToken",
    "ResidualLM",
    "build_model",
    "cheapest_config",
    "config_error_message",
    "count_parameters",
    "decode_cost",
    "decode_flops",
    "flavour",
    "flops_per_token",
    "forward_flops",
    "forward_flops_per_token",
    "kv_cache_bytes",
    "parameter_count",
    "tokens_for",
    "training_flops",
]


def __getattr__(name: str) -> object:
    """The model half, imported on first use (module docstring)."""
    if name == "ResidualLM":
        from . import base

        value: object = base.ResidualLM
    elif name in ("FAMILIES", "build_model", "count_parameters"):
        from . import model

        value = getattr(model, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later look-ups find it without this function
    return value
