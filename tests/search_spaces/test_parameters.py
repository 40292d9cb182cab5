"""The closed-form parameter count against the built model's, over every family and every knob that changes it."""

from __future__ import annotations

import itertools

import pytest
import torch

from search_spaces.residual_lm import FAMILIES, ArchConfig, build_model, count_parameters, parameter_count

SHAPES = [
    dict(n_layers=1, d_model=8, n_heads=2, vocab_size=2),
    dict(n_layers=3, d_model=32, n_heads=2, vocab_size=64, mlp_ratio=4.0),
    dict(n_layers=6, d_model=48, n_heads=4, vocab_size=257, mlp_ratio=1.0, nag_gate_components=5),
]
ROUTING = [
    dict(),
    dict(mod_rate=0.5, mod_every=1),
    dict(mod_rate=0.25, mod_every=2, mod_granularity="block"),
    dict(mod_rate=0.5, mod_every=3, mod_routing="topk"),
    dict(mod_rate=0.5, mod_every=1, mod_routing="predictor"),
    dict(mod_rate=0.875, mod_every=2, mod_routing="predictor", mod_granularity="block"),
]


def _built(cfg: ArchConfig) -> int:
    with torch.device("meta"):  # shapes only
        return count_parameters(build_model(cfg))


@pytest.mark.parametrize("family", FAMILIES)
def test_the_closed_form_count_equals_the_built_model_for_every_knob(family):
    checked = 0
    for shape, routing, tied, parametrization in itertools.product(
        SHAPES, ROUTING, (False, True), ("standard", "completep")
    ):
        if routing and shape["n_layers"] < 2:
            continue  # nothing to route
        cfg = ArchConfig(**shape, **routing, residual=family, tie_embeddings=tied, parametrization=parametrization)
        assert parameter_count(cfg) == _built(cfg), cfg
        checked += 1
    assert checked == 2 * 2 * (len(SHAPES) * len(ROUTING) - (len(ROUTING) - 1))


def test_the_count_changes_with_each_term():
    base = ArchConfig(n_layers=4, d_model=32, n_heads=2, vocab_size=64)
    d, h, V, L = base.d_model, base.mlp_hidden, base.vocab_size, base.n_layers
    assert parameter_count(base) == 2 * V * d + L * (4 * d * d + 3 * d * h + 2 * d) + d
    ancre = base.model_copy(update={"residual": "ancre"})
    assert parameter_count(ancre) - parameter_count(base) == L * (L + 1) // 2
    routed = ArchConfig(**{**base.model_dump(), "mod_rate": 0.5, "mod_every": 2})  # blocks 2 and 4, two sublayers
    assert parameter_count(routed) - parameter_count(base) == 2 * 2 * d


def test_sizing_a_config_imports_no_torch_and_the_models_load_on_first_use():
    """A fresh process sizes a config (parameters, FLOPs, decode cost, the cheapest config) with torch never
    imported, gets the same counts as here, and then builds a model by the package's lazy names."""
    import subprocess
    import sys

    from search_spaces.residual_lm import decode_cost, flops_per_token

    cfg = ArchConfig(**SHAPES[2], residual="nag", **ROUTING[5])
    script = f"""
import sys
from search_spaces.residual_lm import ArchConfig, decode_cost, flops_per_token, parameter_count
cfg = ArchConfig.model_validate({cfg.model_dump()!r})
print(parameter_count(cfg), flops_per_token(cfg).executed, decode_cost(cfg, 64).kv_bytes_per_token)
print("torch" in sys.modules)
from search_spaces.residual_lm import FAMILIES, build_model
print(type(build_model(cfg)) is FAMILIES["nag"], "torch" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    expected = [parameter_count(cfg), flops_per_token(cfg).executed, decode_cost(cfg, 64).kv_bytes_per_token]
    assert [float(x) for x in out[:3]] == [float(x) for x in expected]
    assert out[3:] == ["False", "True", "True"]
    assert _built(cfg) == parameter_count(cfg)
