"""Decoding with a KV cache gives the full forward's logits, for every family with and without MoD.

Each model first runs a few training forwards, so the MoD routers hold real thresholds and skip about
half the tokens; then, in evaluation mode, a prompt is run in one call and the rest one token at a
time against the cache. Routing decides by comparing a score with a threshold: a score within float
rounding of it may go either way between two differently shaped computations (the full forward at
two lengths shows the same), so the seeds here are ones without such a tie; the tolerance is fp32's.
"""

import itertools

import pytest
import torch

from search_spaces.residual_lm import ArchConfig, build_model
from search_spaces.residual_lm.kv_cache import KVCache

VARIANTS = list(itertools.product(["cascaded", "nag", "ancre"], [0.0, 0.5], ["sublayer", "block"]))
VARIANTS = [(f, m, g) for f, m, g in VARIANTS if m > 0 or g == "sublayer"]


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
    return model.eval(), tokens


@pytest.mark.parametrize(("residual", "mod_rate", "granularity"), VARIANTS)
def test_cached_decoding_matches_the_full_forward(residual, mod_rate, granularity):
    model, tokens = routed_model(residual, mod_rate, granularity)
    with torch.no_grad():
        full = model(tokens)
        if mod_rate:  # the routers do skip tokens, so the cache really holds invalid keys
            rates = [float(r.last_skip_rate) for r in model.routers().values()]
            assert all(0.2 < r < 0.8 for r in rates), rates
        cache = KVCache()
        with model.decoding(cache):
            pieces = [model(tokens[:, :20])] + [model(tokens[:, t : t + 1]) for t in range(20, 48)]
    assert cache.length == 48 and len(cache.layers) == 3  # one cache per attention, every position in each
    torch.testing.assert_close(torch.cat(pieces, 1), full, atol=2e-5, rtol=0)
    assert all(a.kv is None for a in model.modules() if hasattr(a, "kv"))  # detached after the block


def test_a_routed_attention_marks_the_tokens_it_skipped_as_invalid_keys():
    model, tokens = routed_model("cascaded", 0.5)
    cache = KVCache()
    with torch.no_grad(), model.decoding(cache):
        model(tokens[:, :30])
    keeps = {j: r.last_selection.keep for (kind, j), r in model.routers().items() if kind == "attn"}
    for j, keep in keeps.items():  # block j's attention is the j-th cache (1-based)
        assert torch.equal(cache.layers[j - 1].valid, keep)


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
