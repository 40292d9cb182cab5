"""Changing tokens t+1.. never changes the logits at positions <= t (every family, MoD on and off).

"Never" up to float rounding: under MoD the padded attention batch (B, max_count) depends on the
whole batch, and a different GEMM/SDPA blocking rounds differently (seen: 3e-8). A real leak moves
logits by orders of magnitude more, as the top-k test shows.
"""

import copy

import pytest
import torch

from helpers import FAMILIES, small_cfg, tokens, warmed_model

ROUNDING = 1e-5


def _perturb_after(idx: torch.Tensor, t: int, vocab: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    out = idx.clone()
    out[:, t + 1 :] = torch.randint(0, vocab, out[:, t + 1 :].shape, generator=gen)
    return out


def _max_leak(model, cfg, t: int, train_mode: bool) -> float:
    """Largest change of logits[:, :t+1] when every token after t is redrawn."""
    idx = tokens(cfg, batch=6)
    worst = 0.0
    for seed in range(3):
        other = _perturb_after(idx, t, cfg.vocab_size, seed)
        # Train mode updates MoD thresholds after each batch: run both inputs from the same state.
        runs = [copy.deepcopy(model).train(train_mode) for _ in range(2)]
        with torch.no_grad():
            a, b = runs[0](idx), runs[1](other)
        worst = max(worst, (a[:, : t + 1] - b[:, : t + 1]).abs().max().item())
        assert (a[:, t + 1 :] - b[:, t + 1 :]).abs().max() > 0  # the perturbation did change something
    return worst


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mod_rate", [0.0, 0.3, 0.6])
@pytest.mark.parametrize("train_mode", [False, True])
def test_logits_do_not_depend_on_future_tokens(family, mod_rate, train_mode):
    cfg = small_cfg(residual=family, mod_rate=mod_rate)
    model = warmed_model(cfg)
    for t in (0, 5, cfg.seq_len - 2):
        assert _max_leak(model, cfg, t, train_mode) < ROUNDING


@pytest.mark.parametrize("family", FAMILIES)
def test_topk_routing_is_flagged_and_really_not_causal(family):
    """Per-sequence top-k (expert choice) is the named non-causal option, and the test above would catch it."""
    cfg = small_cfg(residual=family, mod_rate=0.5, mod_routing="topk")
    assert not cfg.is_causal
    assert small_cfg(residual=family, mod_rate=0.5).is_causal
    model = warmed_model(cfg)
    assert max(_max_leak(model, cfg, t, False) for t in (4, 8, 11)) > 1000 * ROUNDING


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("train_mode", [False, True])
def test_block_routing_is_causal(family, train_mode):
    """One decision per token for the whole block (threshold carried in from earlier batches)."""
    cfg = small_cfg(residual=family, mod_rate=0.6, mod_every=1, mod_granularity="block")
    model = warmed_model(cfg)
    for t in (0, 5, cfg.seq_len - 2):
        assert _max_leak(model, cfg, t, train_mode) < ROUNDING


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("granularity", ["sublayer", "block"])
def test_predictor_routing_is_causal_at_evaluation_only(family, granularity):
    """The MoD paper's auxiliary predictor decides at evaluation (causal); training keeps each sequence's top-k."""
    cfg = small_cfg(residual=family, mod_rate=0.5, mod_routing="predictor", mod_granularity=granularity)
    assert not cfg.is_causal and cfg.eval_is_causal
    model = warmed_model(cfg)
    for t in (0, 5, cfg.seq_len - 2):
        assert _max_leak(model, cfg, t, train_mode=False) < ROUNDING
    assert max(_max_leak(model, cfg, t, True) for t in (4, 8, 11)) > 1000 * ROUNDING
