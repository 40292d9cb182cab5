"""Shared parts: RoPE encodes relative positions only."""

import torch

from search_spaces.residual_lm.common import apply_rope, rope_frequencies


def test_rope_scores_depend_only_on_the_offset():
    freqs = rope_frequencies(64, 16)
    q, k = torch.randn(16), torch.randn(16)

    def score(tq, tk):
        return (apply_rope(q, freqs[tq]) * apply_rope(k, freqs[tk])).sum()

    torch.testing.assert_close(score(10, 3), score(40, 33))
    torch.testing.assert_close(score(5, 5), (q * k).sum())  # zero offset: no rotation left
    assert not torch.isclose(score(10, 3), score(10, 4))


def test_rope_preserves_norms_and_dtype():
    x = torch.randn(3, 7, 8, dtype=torch.bfloat16)
    y = apply_rope(x, rope_frequencies(7, 8)[None])
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float().norm(dim=-1), x.float().norm(dim=-1), rtol=2e-2, atol=0)
