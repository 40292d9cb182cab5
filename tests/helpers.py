"""Small configurations, deterministic inputs and warmed models shared by the tests."""

from __future__ import annotations

import torch

from search_spaces.residual_lm import ArchConfig, build_model, flavour

FAMILIES = ("cascaded", "nag", "ancre")


def small_cfg(**overrides) -> ArchConfig:
    return flavour("debug", **overrides)


def tokens(cfg: ArchConfig, batch: int = 4, seq_len: int | None = None, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (batch, seq_len or cfg.seq_len), generator=gen)


def warmed_model(cfg: ArchConfig, batches: int = 30, batch: int = 8):
    """A model whose MoD thresholds have been warmed on random batches (weights untouched), in eval mode."""
    model = build_model(cfg)
    model.train()
    with torch.no_grad():
        for i in range(batches):
            model(tokens(cfg, batch, seed=1000 + i))
    return model.eval()
