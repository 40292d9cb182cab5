"""`build_model(cfg)`: the residual family named by `cfg.residual`, freshly initialised."""

from __future__ import annotations

import torch

from .ancre import AncreLM
from .base import ResidualLM
from .cascaded import CascadedLM
from .config import ArchConfig
from .nag import NagLM
from .parametrization import TensorGrowth, TensorRole

FAMILIES: dict[str, type[ResidualLM]] = {"cascaded": CascadedLM, "nag": NagLM, "ancre": AncreLM}


def build_model(cfg: ArchConfig) -> ResidualLM:
    """A `torch.nn.Module` whose `forward(idx: (B, T) long) -> logits (B, T, vocab_size)`.

    Built, then described (`width_growth`), then initialised by the parametrization's rules.
    """
    model = FAMILIES[cfg.residual](cfg)
    model.width_growth = width_growth(model)
    model.init_weights()
    return model


def width_growth(model: ResidualLM) -> dict[str, TensorGrowth]:
    """Which dimensions of each parameter grow with width: its shape against that of the same
    parameter in a meta-device build at width 2d (as the `mup` package finds its base shapes)."""
    wide_cfg = model.cfg.model_copy(update={"d_model": 2 * model.cfg.d_model})
    with torch.device("meta"):
        wide = type(model)(wide_cfg)  # shapes only: no memory, no random numbers drawn
    wide_shapes = {name: p.shape for name, p in wide.named_parameters()}
    # A tied table is one parameter with the embedding's role: that entry is written second.
    roles: dict[int, TensorRole] = {id(model.unembedding): "unembedding", id(model.tok_emb.weight): "embedding"}
    growth = {}
    for name, p in model.named_parameters():
        changed = [a != b for a, b in zip(p.shape, wide_shapes[name], strict=True)]
        role = roles.get(id(p))
        if p.dim() == 2:  # nn.Linear / nn.Embedding weights are (out, in)
            growth[name] = TensorGrowth(changed[0], changed[1], role)
        else:  # vectors: a width-sized one grows in its fan-out (norm gains, biases)
            growth[name] = TensorGrowth(any(changed), False, role)
    return growth


def count_parameters(model: ResidualLM) -> int:
    """Trainable parameters, counting a tied embedding once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
