"""Mixture-of-Depths: realised rate, identity on skipped pairs, attention over selected tokens only."""

import math

import pytest
import torch
import torch.nn.functional as F

from helpers import FAMILIES, small_cfg, tokens, warmed_model
from search_spaces.residual_lm import build_model
from search_spaces.residual_lm.common import apply_rope
from search_spaces.residual_lm.routing import DepthRouter, TokenSelection


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(
    "mod_rate, granularity", [(0.125, "sublayer"), (0.25, "sublayer"), (0.5, "sublayer"), (0.875, "block")]
)
def test_realised_rate_hits_the_target_after_warm_up(family, mod_rate, granularity):
    cfg = small_cfg(residual=family, mod_rate=mod_rate, seq_len=32, mod_granularity=granularity)
    model = warmed_model(cfg, batches=40, batch=16)
    skipped = total = 0
    with torch.no_grad():
        for i in range(10):
            model(tokens(cfg, batch=16, seed=i))
            for router in model.routers().values():
                skipped += router.last_counts.numel() * cfg.seq_len - router.last_counts.sum().item()
                total += router.last_counts.numel() * cfg.seq_len
    assert abs(skipped / total - mod_rate) < 0.02


def test_threshold_warm_up_executes_everything_then_tracks_the_quantile():
    router = DepthRouter(0.25).train()
    scores = torch.randn(64, 32)
    first = router.select(scores)
    assert first.counts.sum() == scores.numel()  # no threshold carried in yet: nothing skipped
    torch.testing.assert_close(router.threshold, scores.flatten().sort().values[512 - 1])  # 25% of 2048
    first_threshold = router.threshold.item()
    second = router.select(scores)
    assert abs(1 - second.counts.sum().item() / scores.numel() - 0.25) < 0.01
    torch.testing.assert_close(router.eval_threshold, router.threshold.new_tensor(first_threshold))


def test_level_feedback_corrects_a_drifting_score():
    """Scores rising every batch: the previous batch's quantile alone would skip too few tokens."""
    router = DepthRouter(0.25).train()
    realised = []
    for step in range(60):
        sel = router.select(torch.randn(16, 32) + 0.2 * step)
        realised.append(1 - sel.counts.sum().item() / (16 * 32))
    assert abs(sum(realised[30:]) / 30 - 0.25) < 0.02
    assert router.level > 0.25


def test_threshold_is_saved_with_the_model():
    cfg = small_cfg(residual="cascaded", mod_rate=0.25)
    model = warmed_model(cfg)
    state = model.state_dict()
    thresholds = [k for k in state if k.endswith("eval_threshold")]
    assert len(thresholds) == 2 * len(cfg.routed_blocks)
    fresh = build_model(cfg)
    fresh.load_state_dict(state)
    idx = tokens(cfg)
    torch.testing.assert_close(fresh.eval()(idx), model(idx))


def test_token_selection_pads_each_sequence_in_order():
    keep = torch.tensor([[1, 0, 1, 1], [0, 0, 1, 0], [0, 0, 0, 0]], dtype=torch.bool)
    sel = TokenSelection.from_mask(keep)
    assert sel.index.tolist() == [0, 2, 3, 6]
    assert sel.positions.tolist() == [0, 2, 3, 2]
    assert sel.counts.tolist() == [3, 1, 0] and sel.max_count == 3
    assert sel.padded_index.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("family", ["cascaded", "ancre"])
def test_skipped_pairs_are_the_identity_prenorm(family):
    cfg = small_cfg(residual=family, mod_rate=0.5, n_layers=2)
    model = warmed_model(cfg)
    block = model.blocks[1]  # block 2 is routed
    x = torch.randn(4, cfg.seq_len, cfg.d_model)
    with torch.no_grad():
        out = block(x)
    kept = torch.zeros(4 * cfg.seq_len, dtype=torch.bool)
    kept[block.attn_router.last_selection.index] = True
    kept[block.mlp_router.last_selection.index] = True
    flat_in, flat_out = x.flatten(0, 1), out.flatten(0, 1)
    assert (~kept).any() and kept.any()
    assert torch.equal(flat_out[~kept], flat_in[~kept])
    assert (flat_out[kept] != flat_in[kept]).any(-1).all()


def test_skipped_pairs_are_the_identity_nag():
    cfg = small_cfg(residual="nag", mod_rate=0.5, n_layers=2)
    model = warmed_model(cfg)
    sub = model.blocks[1].attn
    u, _ = model.encode(tokens(cfg))
    s = torch.randn(u.shape[:2])
    with torch.no_grad():
        u2, s2 = sub(u, s)
    kept = torch.zeros(u.shape[0] * u.shape[1], dtype=torch.bool)
    kept[sub.router.last_selection.index] = True
    assert torch.equal(u2.flatten(0, 1)[~kept], u.flatten(0, 1)[~kept])
    assert torch.equal(s2.flatten()[~kept], s.flatten()[~kept])
    assert (s2.flatten()[kept] > s.flatten()[kept]).all()


def test_routed_attention_attends_over_selected_tokens_only():
    """The routed path equals dense attention masked to (selected query, selected earlier key) pairs."""
    cfg = small_cfg(residual="cascaded", mod_rate=0.5, seq_len=12)
    attn = build_model(cfg).blocks[1].attn
    x = torch.randn(3, cfg.seq_len, cfg.d_model)
    keep = torch.rand(3, cfg.seq_len) > 0.5
    sel = TokenSelection.from_mask(keep)
    with torch.no_grad():
        routed = attn(x.flatten(0, 1)[sel.index], sel)
        q, k, v = attn.qkv(x).unflatten(-1, (3, cfg.n_heads, cfg.head_dim)).unbind(-3)
        freqs = attn.freqs[:, None]  # (T, 1, hs/2): RoPE at the original positions
        q, k = apply_rope(q, freqs).transpose(1, 2), apply_rope(k, freqs).transpose(1, 2)
        causal = torch.ones(cfg.seq_len, cfg.seq_len, dtype=torch.bool).tril()
        allowed = causal & keep[:, None, :] | torch.eye(cfg.seq_len, dtype=torch.bool)  # (B, Tq, Tk)
        dense = F.scaled_dot_product_attention(q, k, v.transpose(1, 2), attn_mask=allowed[:, None])
        reference = attn.out_proj(dense.transpose(1, 2).flatten(2)).flatten(0, 1)[sel.index]
    torch.testing.assert_close(routed, reference, rtol=1e-5, atol=1e-6)


def test_sequences_with_no_selected_token_are_handled():
    cfg = small_cfg(residual="nag", mod_rate=0.5)
    model = warmed_model(cfg)
    for router in model.routers().values():
        router.eval_threshold.fill_(math.inf)  # skip everything
    logits = model(tokens(cfg))
    assert torch.isfinite(logits).all()
    assert all(r.last_counts.sum() == 0 for r in model.routers().values())


@pytest.mark.parametrize("family", FAMILIES)
def test_block_routing_runs_kept_tokens_through_the_whole_block_and_passes_skipped_ones(family):
    """One router per routed block: a skipped token leaves the block exactly as it came in (for ANCRe: as the
    mix of earlier states), a kept one is changed, and both sublayers count the same executed tokens."""
    cfg = small_cfg(residual=family, mod_rate=0.5, n_layers=2, mod_granularity="block")
    model = warmed_model(cfg)
    block = model.blocks[1]  # block 2 is routed
    assert block.attn_router is None and block.mlp_router is None and block.block_router is not None
    routers = model.routers()
    assert routers[("attn", 2)] is routers[("mlp", 2)] is block.block_router
    with torch.no_grad():
        if family == "nag":
            u, _ = model.encode(tokens(cfg))
            s = torch.randn(u.shape[:2])
            u2, s2 = block(u, s)
            before, after = torch.cat([u, s[..., None]], -1), torch.cat([u2, s2[..., None]], -1)
        else:
            before = torch.randn(4, cfg.seq_len, cfg.d_model)
            base = torch.randn_like(before) if family == "ancre" else None
            after = block(before, base=base)
            before = before if base is None else base
    kept = torch.zeros(before.shape[0] * before.shape[1], dtype=torch.bool)
    kept[block.block_router.last_selection.index] = True
    flat_in, flat_out = before.flatten(0, 1), after.flatten(0, 1)
    assert (~kept).any() and kept.any()
    assert torch.equal(flat_out[~kept], flat_in[~kept])
    assert (flat_out[kept] != flat_in[kept]).any(-1).all()
    state = model.state_dict()
    assert len([k for k in state if k.endswith("eval_threshold")]) == len(cfg.routed_blocks)


@pytest.mark.parametrize("family", FAMILIES)
def test_block_routing_equals_the_dense_block_on_the_kept_tokens(family):
    """With every token kept, a block-routed block computes the dense block (times sigmoid(r) outside NAG)."""
    cfg = small_cfg(residual=family, mod_rate=0.5, n_layers=2, mod_granularity="block")
    routed = build_model(cfg).eval()
    dense = build_model(cfg.model_copy(update={"mod_rate": 0.0})).eval()
    state = {k: v for k, v in routed.state_dict().items() if "router" not in k}
    dense.load_state_dict(state)
    block = routed.blocks[1]
    block.block_router.eval_threshold.fill_(-math.inf)  # keep everything
    if family != "nag":
        x = torch.randn(2, cfg.seq_len, cfg.d_model)
        with torch.no_grad():
            h = block.attn_norm(x)
            gate = torch.sigmoid(block.block_router.scorer(h))  # w . norm(x) with norm(x) formed: (B, T, 1)
            got = block(x)
            a = block.attn(h)
            m = block.mlp(block.mlp_norm(x + a))
        torch.testing.assert_close(got, x + gate * (a + m), rtol=1e-5, atol=1e-6)
        with torch.no_grad():
            torch.testing.assert_close(dense.blocks[1](x), x + a + m, rtol=1e-5, atol=1e-6)
    else:
        idx = tokens(cfg)
        with torch.no_grad():
            torch.testing.assert_close(routed(idx), dense(idx), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_predictor_learns_the_top_k_decisions_and_its_loss_reaches_only_the_predictor(family):
    cfg = small_cfg(residual=family, mod_rate=0.5, mod_every=1, seq_len=32, mod_routing="predictor")
    model = build_model(cfg).train()
    predictors = {n for n, _ in model.named_parameters() if ".predictor." in n}
    assert predictors
    model(tokens(cfg, batch=8))
    aux = model.auxiliary_loss()
    params = dict(model.named_parameters())
    grads = torch.autograd.grad(aux, list(params.values()), allow_unused=True)
    touched = {n for (n, _), g in zip(params.items(), grads, strict=True) if g is not None and g.abs().sum() > 0}
    assert touched and touched <= predictors  # stop-gradient inputs: nothing else learns from it
    first = float(aux.detach())
    opt = torch.optim.Adam([params[n] for n in sorted(predictors)], lr=1e-2)
    for i in range(150):
        model(tokens(cfg, batch=8, seed=i))
        opt.zero_grad()
        model.auxiliary_loss().backward()
        opt.step()
    assert float(model.auxiliary_loss().detach()) < 0.7 * first
    model.eval()
    with torch.no_grad():
        model(tokens(cfg, batch=16, seed=999))
    assert model.auxiliary_loss() is None  # evaluation: the predictor decides, nothing to learn
    for router in model.routers().values():
        assert abs(float(router.last_skip_rate) - 0.5) < 0.2


def test_the_linear_router_scores_without_forming_the_normalised_stream_to_the_same_values_and_gradients():
    """r = (w * g) . x / rms(x) is w . norm(x): equal values, and equal gradients for w, g and x."""
    from search_spaces.residual_lm.routing import LinearRouter

    torch.manual_seed(0)
    router, norm = LinearRouter(64, 0.5), torch.nn.RMSNorm(64, eps=1e-6)
    torch.nn.init.normal_(norm.weight, 1.0, 0.3)
    x = (3.0 * torch.randn(3, 17, 64)).requires_grad_()
    params = (router.scorer.weight, norm.weight, x)
    folded = router.score(x, norm)
    folded_grads = torch.autograd.grad(folded.square().sum(), params)
    formed = router.scorer(norm(x)).squeeze(-1)
    formed_grads = torch.autograd.grad(formed.square().sum(), params)
    torch.testing.assert_close(folded, formed, rtol=1e-5, atol=1e-6)
    for got, want in zip(folded_grads, formed_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
