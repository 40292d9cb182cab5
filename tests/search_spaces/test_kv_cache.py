"""Decoding with a KV cache gives the full forward's logits, for every family with and without MoD, and a
token a router skips does no work and stores nothing.

Each model first runs a few training forwards, so the MoD routers hold real thresholds and skip about
half the tokens; then, in evaluation mode, a batch of 4 sequences (which route differently) is run as a
prompt, a chunk of a few tokens and then one token at a time against the cache. Routing decides by
comparing a score with a threshold: a score within float rounding of it may go either way between two
differently shaped computations (the full forward at two lengths shows the same), so the seeds here are
ones without such a tie; the tolerance is fp32's.
"""

import itertools
import math

import pytest
import torch

from search_spaces.residual_lm import ArchConfig, build_model, kv_cache_bytes
from search_spaces.residual_lm.cascaded import rms_norm
from search_spaces.residual_lm.common import apply_rope
from search_spaces.residual_lm.kv_cache import KVCache

VARIANTS = list(itertools.product(["cascaded", "nag", "ancre"], [0.0, 0.5], ["sublayer", "block"]))
VARIANTS = [(f, m, g, "causal_threshold") for f, m, g in VARIANTS if m > 0 or g == "sublayer"]
VARIANTS += [(f, 0.5, g, "predictor") for f, g in [("cascaded", "block"), ("nag", "sublayer"), ("ancre", "block")]]
PIECES = (20, 5) + (1,) * 23  # a prompt, a chunk, then single tokens: 48 positions


def routed_model(residual: str, mod_rate: float, granularity: str = "sublayer", routing: str = "causal_threshold"):
    torch.manual_seed(0)
    cfg = ArchConfig(
        residual=residual,
        d_model=32,
        n_layers=3,
        n_heads=4,
        vocab_size=64,
        seq_len=48,
        mod_rate=mod_rate,
        mod_every=1,
        mod_granularity=granularity,
        mod_routing=routing,
    )
    model = build_model(cfg)
    tokens = torch.randint(0, 64, (4, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for _ in range(3):  # training forwards set the routers' thresholds
            model(tokens)
    if routing == "predictor":  # the predictors learn their routers' top-k choices (their loss reaches them only)
        routers = {id(r): r for r in model.routers().values()}.values()  # a block router appears twice
        opt = torch.optim.Adam([p for r in routers for p in r.predictor.parameters()], lr=0.02)
        for _ in range(20):
            model(tokens)
            opt.zero_grad()
            model.auxiliary_loss().backward()
            opt.step()
    return model.eval(), tokens


def decode_in_pieces(model, tokens, cache: KVCache) -> torch.Tensor:
    """Logits (B, T, V) of `tokens` fed to the cache in `PIECES`."""
    starts = itertools.accumulate(PIECES, initial=0)
    with model.decoding(cache):
        return torch.cat([model(tokens[:, s : s + n]) for s, n in zip(starts, PIECES, strict=False)], 1)


@pytest.mark.parametrize(("residual", "mod_rate", "granularity", "routing"), VARIANTS)
def test_cached_decoding_matches_the_full_forward(residual, mod_rate, granularity, routing):
    model, tokens = routed_model(residual, mod_rate, granularity, routing)
    cache = KVCache()
    with torch.no_grad():
        full = model(tokens)
        if mod_rate:  # the routers do skip tokens
            rates = [float(r.last_skip_rate) for r in model.routers().values()]
            assert all(0.2 < r < 0.8 for r in rates), rates
        cached = decode_in_pieces(model, tokens, cache)
    assert cache.length == 48 and len(cache.layers) == 3
    torch.testing.assert_close(cached, full, atol=2e-5, rtol=0)
    lengths = [layer.lengths.tolist() for layer in cache.layers]
    assert lengths[0] == [48] * 4  # block 1 is never routed
    if mod_rate:  # the routed attentions hold fewer positions, a different number per sequence
        assert all(max(n) < 48 and len(set(n)) > 1 for n in lengths[1:]), lengths
    assert all(a.kv is None for a in model.modules() if hasattr(a, "kv"))  # detached after the block


@pytest.mark.parametrize("granularity", ["sublayer", "block"])
def test_a_routed_attention_holds_only_the_keys_of_the_positions_it_executed(granularity):
    """Sequence b's slots hold, in order, the keys of the tokens its router kept, RoPE at their true positions."""
    model, tokens = routed_model("cascaded", 0.5, granularity)
    inputs = {}
    for j, block in enumerate(model.blocks, start=1):
        block.register_forward_pre_hook(lambda module, args, j=j: inputs.__setitem__(j, args[0]))
    cache = KVCache()
    with torch.no_grad(), model.decoding(cache):
        model(tokens[:, :30])
        kept = {j: r.last_selection.keep for (kind, j), r in model.routers().items() if kind == "attn"}
        for j, keep in kept.items():  # block j's attention is the j-th cache (1-based)
            block, layer = model.blocks[j - 1], cache.layers[j - 1]
            qkv = block.attn.qkv(rms_norm(block.attn_norm, inputs[j])).unflatten(-1, (3, 4, 8))  # (B, T, 3, nh, hs)
            keys = apply_rope(qkv[:, :, 1], block.attn.freqs[:30, None, :])  # (B, T, nh, hs)
            assert torch.equal(layer.lengths, keep.sum(1)) and layer.filled == int(keep.sum(1).max()) < 30
            for b in range(4):
                held = layer.keys[b, :, : int(keep[b].sum())].transpose(0, 1)  # (n_b, nh, hs)
                torch.testing.assert_close(held, keys[b, keep[b]], atol=1e-6, rtol=0)
    assert cache.layers[0].filled == 30


@pytest.mark.parametrize("residual", ["cascaded", "nag", "ancre"])
@pytest.mark.parametrize("granularity", ["sublayer", "block"])
def test_a_skipped_token_runs_nothing_and_stores_nothing(residual, granularity):
    """A decoding step that every router skips: no routed sublayer runs, the block hands back its input
    itself (no gather, no scatter; both lanes for NAG), and the routed attentions store no key."""
    model, tokens = routed_model(residual, 0.5, granularity)
    ran = []
    for j in (2, 3):
        block = model.blocks[j - 1]
        for sub in (block.attn, block.mlp):  # attention and MLP themselves (NAG's sit inside a NagSublayer)
            getattr(sub, "inner", sub).register_forward_hook(lambda module, args, out, j=j: ran.append(j))
    cache = KVCache()
    with torch.no_grad(), model.decoding(cache):
        model(tokens[:, :10])
        held = [layer.lengths.clone() for layer in cache.layers]
        for router in model.routers().values():
            router.eval_threshold.fill_(math.inf)  # every token skips
        ran.clear()
        model(tokens[:, 10:11])
        assert ran == []
        for j in (2, 3):
            assert torch.equal(cache.layers[j - 1].lengths, held[j - 1])
        stream = model.tok_emb(tokens[:, 11:12])
        block = model.blocks[1]
        if residual == "nag":
            u, s = model.encode(tokens[:, 11:12])
            assert all(a is b for a, b in zip(block(u, s), (u, s), strict=True))
        elif residual == "ancre":
            base = torch.randn_like(stream)
            assert block(stream, base=base) is base  # a skipped token's block output is the mix of earlier states
        else:
            assert block(stream) is stream


@pytest.mark.parametrize("residual", ["cascaded", "nag", "ancre"])
def test_the_cache_holds_the_bytes_counted_from_the_realised_decisions(residual):
    """One sequence: the positions each routed attention executed, summed from its router's decisions over
    the prompt and every step, give `kv_cache_bytes`; the cache holds exactly that, and with chunk=1 its
    buffers are exactly that large (the default chunk reserves under a chunk more per layer)."""
    model, tokens = routed_model(residual, 0.5, "block")
    cfg = model.cfg
    for chunk in (1, 32):
        cache, held = KVCache(chunk=chunk), dict.fromkeys(cfg.routed_blocks, 0)
        with torch.no_grad(), model.decoding(cache):
            for start, n in zip(itertools.accumulate(PIECES, initial=0), PIECES, strict=False):
                model(tokens[:1, start : start + n])
                for (kind, j), router in model.routers().items():
                    held[j] += int(router.last_counts.sum()) if kind == "attn" else 0
        counted = kv_cache_bytes(cfg, 48, torch.float32, held=held)
        assert 0 < held[2] < 48 and cache.nbytes == counted < kv_cache_bytes(cfg, 48, held={2: 48, 3: 48})
        buffers = sum(t.untyped_storage().nbytes() for layer in cache.layers for t in (layer.keys, layer.values))
        assert buffers == cache.reserved_nbytes
        slack = 2 * cfg.d_model * 4 * (chunk - 1) * cfg.n_layers
        assert counted <= buffers <= counted + slack and (chunk > 1 or buffers == counted)


def test_decoding_is_refused_where_it_would_be_wrong():
    model, tokens = routed_model("cascaded", 0.5, routing="topk")
    with pytest.raises(ValueError, match="topk"), model.decoding(KVCache()):
        pass
    model, tokens = routed_model("nag", 0.5)
    with pytest.raises(ValueError, match="eval"), model.train().decoding(KVCache()):
        pass
    model.eval()
    with pytest.raises(ValueError, match="seq_len 48"), torch.no_grad(), model.decoding(KVCache()):
        model(tokens)
        model(tokens[:, :1])
