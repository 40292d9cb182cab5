"""`residual_lm`: a LLaMA-style decoder with cascaded, NAG or ANCRe residuals and Mixture-of-Depths."""

from .base import ResidualLM
from .config import FLAVOURS, ArchConfig, config_error_message, flavour
from .flops import FlopsPerToken, flops_per_token, forward_flops
from .model import FAMILIES, build_model, count_parameters

__all__ = [
    "FAMILIES",
    "FLAVOURS",
    "ArchConfig",
    "FlopsPerToken",
    "ResidualLM",
    "build_model",
    "config_error_message",
    "count_parameters",
    "flavour",
    "flops_per_token",
    "forward_flops",
]
