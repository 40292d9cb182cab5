"""`build_model(cfg)`: the residual family named by `cfg.residual`, freshly initialised."""

from __future__ import annotations

from .ancre import AncreLM
from .base import ResidualLM
from .cascaded import CascadedLM
from .config import ArchConfig
from .nag import NagLM

FAMILIES: dict[str, type[ResidualLM]] = {"cascaded": CascadedLM, "nag": NagLM, "ancre": AncreLM}


def build_model(cfg: ArchConfig) -> ResidualLM:
    """A `torch.nn.Module` whose `forward(idx: (B, T) long) -> logits (B, T, vocab_size)`."""
    return FAMILIES[cfg.residual](cfg)


def count_parameters(model: ResidualLM) -> int:
    """Trainable parameters, counting a tied embedding once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
