"""Decode cost (`decode_cost`): the KV-cache bytes and decode FLOPs per token a config is counted to need,
against the formula's factors, the full forward's FLOPs, and FlopCounterMode on real decoding steps.

The count from realised decisions against the bytes a cache holds is in test_kv_cache.py.
"""

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from helpers import FAMILIES, small_cfg, tokens
from search_spaces.residual_lm import build_model, decode_cost, decode_flops, forward_flops, kv_cache_bytes
from search_spaces.residual_lm.kv_cache import KVCache

PUBLISHED = {"mod_rate": 0.875, "mod_every": 2, "mod_granularity": "block"}
CONTEXT = 10


def test_the_kv_cache_holds_k_and_v_of_every_executed_position():
    cfg = small_cfg(n_layers=4, d_model=32, n_heads=2)
    assert kv_cache_bytes(cfg, 100) == 2 * 4 * 32 * 4 * 100  # K and V x layers x d x fp32 bytes x positions
    assert kv_cache_bytes(cfg, 100, torch.bfloat16) == kv_cache_bytes(cfg, 100) / 2
    routed = small_cfg(n_layers=4, d_model=32, n_heads=2, **PUBLISHED)  # blocks 2 and 4 routed at 0.875
    assert kv_cache_bytes(routed, 100) == 2 * 32 * 4 * (100 + 12.5 + 100 + 12.5)
    assert kv_cache_bytes(routed, 100, held={2: 7, 4: 30}) == 2 * 32 * 4 * (100 + 7 + 100 + 30)
    cost = decode_cost(routed, 1024)
    assert cost.kv_bytes_per_token / cost.kv_bytes_per_token_nominal == (1 + 0.125) / 2
    assert cost.kv_bytes_per_token_nominal == decode_cost(cfg, 1024).kv_bytes_per_token


@pytest.mark.parametrize("family", FAMILIES)
def test_a_dense_token_costs_what_one_more_position_adds_to_the_full_forward(family):
    cfg = small_cfg(residual=family, mod_rate=0.0)
    for context in (0, 7, 100):
        longer, shorter = forward_flops(cfg, context + 1, {}), forward_flops(cfg, context, {})
        marginal = {k: longer[k] - shorter[k] for k in longer}
        assert decode_flops(cfg, context) == pytest.approx(marginal, rel=1e-12)
        assert decode_cost(cfg, context + 1).flops_per_token == decode_cost(cfg, context + 1).flops_per_token_nominal


def test_a_routed_attention_core_falls_by_the_kept_share_squared():
    cfg = small_cfg(n_layers=4, **PUBLISHED)
    kept = 1 - 0.875
    core = decode_flops(cfg, 1000)["attn_core"]
    assert core == pytest.approx(4 * cfg.d_model * (2 * 1001 + 2 * kept * (kept * 1000 + 1)), rel=1e-12)
    cost = decode_cost(cfg, 1000)
    assert cost.flops_per_token < cost.flops_per_token_nominal == sum(decode_flops(cfg, 1000, skip_rate=0).values())
    assert cost.flops_breakdown["router"] == 2 * 2 * cfg.d_model  # blocks 2 and 4 score every token


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("granularity", ["sublayer", "block"])
@pytest.mark.parametrize("routing", ["causal_threshold", "predictor"])
@pytest.mark.parametrize("decision", ["skip", "execute"])
def test_decode_flops_match_flop_counter_mode_on_a_decoding_step(family, granularity, routing, decision):
    """Every router forced to skip (or execute) every token from the prompt on: one decoding step counts
    `decode_flops` at skip rate 1 (or 0), less the attention core and ANCRe's mixing, which FlopCounterMode
    does not see on CPU (flops.py); the attention core is 4 d per key the executed attentions hold."""
    cfg = small_cfg(residual=family, mod_rate=0.5, mod_granularity=granularity, mod_routing=routing)
    model = build_model(cfg).eval()
    routers = {id(r): r for r in model.routers().values()}.values()
    for router in routers:
        keep = decision == "execute"
        router.eval_threshold.fill_(-math.inf if keep else math.inf)
        if router.predictor is not None:  # keep iff the predictor's logit > 0
            torch.nn.init.zeros_(router.predictor[2].weight)
            torch.nn.init.constant_(router.predictor[2].bias, 1.0 if keep else -1.0)
    cache = KVCache()
    with torch.no_grad(), model.decoding(cache):
        model(tokens(cfg, batch=1, seq_len=CONTEXT))
        with FlopCounterMode(display=False) as counter:
            model(tokens(cfg, batch=1, seq_len=1, seed=1))
    expected = decode_flops(cfg, CONTEXT, skip_rate=0.0 if decision == "execute" else 1.0)
    assert counter.get_total_flops() == expected_matmuls(expected) > 0
    executed = [j for j in range(1, cfg.n_layers + 1) if decision == "execute" or j not in cfg.routed_blocks]
    assert expected["attn_core"] == sum(4 * cfg.d_model * cache.layers[j - 1].filled for j in executed)


def expected_matmuls(parts: dict) -> float:
    return sum(parts.values()) - parts["attn_core"] - parts["ancre_mix"]
