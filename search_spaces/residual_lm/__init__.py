"""`residual_lm`: a LLaMA-style decoder with cascaded, NAG or ANCRe residuals and Mixture-of-Depths."""

from .base import ResidualLM
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
from .model import FAMILIES, build_model, count_parameters
from .parameters import parameter_count

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
