"""FLOP accounting (docs/design.md §3.5) against torch's FlopCounterMode on real forward passes.

On CPU, FlopCounterMode has no formula for the fused SDPA kernel, and ANCRe's mixing is a fused
multiply-add (ops.ancre_mix), not a matmul, so it counts exactly our total minus the attention core
(QK^T and AV) and the mixing. Those two are checked separately: the core by counting attended pairs,
the mixing against FlopCounterMode on the equivalent (1 x j) @ (j x BTd) matmul.
"""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from helpers import FAMILIES, small_cfg, tokens, warmed_model
from search_spaces.residual_lm import build_model, flops_per_token

SHAPES = [
    {},
    {"d_model": 48, "n_heads": 3, "n_layers": 2, "mlp_ratio": 3.0},
    {"d_model": 64, "n_heads": 8, "n_layers": 5, "vocab_size": 100, "tie_embeddings": True},
]
MOD = [
    {"mod_rate": 0.0},
    {"mod_rate": 0.25, "mod_every": 1},
    {"mod_rate": 0.5, "mod_every": 2},
    {"mod_rate": 0.4, "mod_routing": "topk"},
    {"mod_rate": 0.5, "mod_every": 1, "mod_granularity": "block"},
    {"mod_rate": 0.875, "mod_every": 2, "mod_granularity": "block"},
    {"mod_rate": 0.5, "mod_every": 1, "mod_routing": "predictor"},
    {"mod_rate": 0.875, "mod_every": 2, "mod_granularity": "block", "mod_routing": "predictor"},
]


def _counted(model, idx, backward=False):
    with FlopCounterMode(display=False) as counter:
        logits = model(idx)
        if backward:
            logits.square().mean().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mod", MOD)
def test_matmul_flops_match_flop_counter_mode(family, shape, mod):
    cfg = small_cfg(residual=family, **shape, **mod)
    model = warmed_model(cfg, batches=5)
    for seq_len in (cfg.seq_len, 5):
        counted = _counted(model, tokens(cfg, batch=3, seq_len=seq_len))
        ours = model.last_executed_flops()
        assert counted == sum(ours.values()) - ours["attn_core"] - ours["ancre_mix"]
        assert counted > 0


@pytest.mark.parametrize("shape", SHAPES)
def test_ancre_mixing_flops_equal_the_stacked_matmul(shape):
    """Block j mixes the j states o_0..o_{j-1}: FlopCounterMode on p (1 x j) @ stack (j x BTd)."""
    cfg = small_cfg(residual="ancre", **shape)
    model = build_model(cfg)
    idx = tokens(cfg, batch=3)
    model(idx)
    state = torch.zeros(idx.numel() * cfg.d_model)
    with FlopCounterMode(display=False) as counter:
        for j in range(1, cfg.n_layers + 1):
            torch.ones(1, j) @ torch.stack([state] * j)
    assert model.last_executed_flops()["ancre_mix"] == counter.get_total_flops() > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_training_step_costs_three_forward_passes(family):
    cfg = small_cfg(residual=family, mod_rate=0.25)
    model = warmed_model(cfg, batches=5)  # eval mode: thresholds frozen, both passes decide alike
    forward = _counted(model, tokens(cfg), backward=False)
    training = _counted(model, tokens(cfg), backward=True)
    assert training == 3 * forward


@pytest.mark.parametrize("mod_rate", [0.0, 0.5])
def test_attention_core_counts_the_causal_pairs_attended(mod_rate):
    cfg = small_cfg(residual="cascaded", mod_rate=mod_rate, mod_every=1)
    model = warmed_model(cfg)
    model(tokens(cfg, batch=5))
    pairs = 0
    causal = torch.ones(cfg.seq_len, cfg.seq_len).tril()
    routers = model.routers()
    for j in range(1, cfg.n_layers + 1):
        keep = torch.ones(5, cfg.seq_len)
        if ("attn", j) in routers:
            keep = torch.zeros(5 * cfg.seq_len)
            keep[routers[("attn", j)].last_selection.index] = 1
            keep = keep.view(5, cfg.seq_len)
        pairs += torch.einsum("bq,qk,bk->", keep, causal, keep).item()  # allowed (query, key) pairs
    assert model.last_executed_flops()["attn_core"] == 4 * cfg.d_model * pairs


def test_dense_matmul_flops_are_twice_the_matmul_parameters():
    """nanoGPT's 6N rule, forward half: 2 FLOPs per weight per token for every matmul weight."""
    cfg = small_cfg(residual="cascaded")
    model = build_model(cfg)
    matmul_weights = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and n != "tok_emb.weight")
    per_token = flops_per_token(cfg).executed_breakdown
    assert sum(per_token.values()) - per_token["attn_core"] == 2 * matmul_weights


@pytest.mark.parametrize("family", FAMILIES)
def test_nominal_equals_executed_without_mod(family):
    cfg = small_cfg(residual=family)
    fpt = flops_per_token(cfg)
    assert fpt.nominal == fpt.executed
    model = build_model(cfg)
    model(tokens(cfg))
    assert model.last_executed_flops_per_token() == pytest.approx(fpt.executed, rel=1e-12)


@pytest.mark.parametrize("family", FAMILIES)
def test_expected_executed_flops_match_realised_ones(family):
    cfg = small_cfg(residual=family, mod_rate=0.25, seq_len=32)
    model = warmed_model(cfg, batches=40, batch=16)
    realised = []
    for seed in range(8):  # one batch's realised rate varies by a few points around the target
        model(tokens(cfg, batch=16, seed=seed))
        realised.append(model.last_executed_flops_per_token())
    fpt = flops_per_token(cfg)
    assert fpt.executed < fpt.nominal
    assert sum(realised) / len(realised) == pytest.approx(fpt.executed, rel=0.02)
