"""Mixture-of-Depths: which (token, sublayer) pairs a routed sublayer executes.

A routed sublayer scores every token, executes the tokens whose score passes a threshold and
leaves the others unchanged (identity). The default decision is causal:

    keep[b, t] = score[b, t] > threshold

where `threshold` is a buffer carried in from *earlier* batches. Only after the decision does a
training batch move the threshold, so a token's fate never depends on later tokens of its own
sequence. The threshold is a running quantile with integral feedback:

    level     <- clip(level + GAIN * (mod_rate - realised skip rate of this batch), 0, 1)
    threshold <- quantile(this batch's scores, level)   (lower empirical quantile)

While training moves the scores (gates and routers learn fast early on), the previous batch's
quantile lags behind and the realised rate misses; `level` absorbs that bias (measured on the
demo size, NAG at mod_rate 0.25, steps 40-80: realised 0.001 with an EMA of batch quantiles,
0.19 with the last batch's quantile alone, 0.26 with this feedback). One batch's quantile is
noisy, though, so evaluation and export use `eval_threshold`, an EMA of the training thresholds
(frozen weights: realised rate within 2 points of the target; the last threshold alone missed by
up to 3.7). An uninitialised threshold executes every token. All of it is saved with the model.

`mod_routing="topk"` instead keeps the top (1 - mod_rate) * T tokens of each sequence (expert
choice, Raposo et al. 2024). It hits the rate exactly but is NOT causal.

`mod_routing="predictor"` is the MoD paper's other causal remedy (its auxiliary MLP predictor):
training decides by per-sequence top-k (not causal), and a small MLP reading the router's input
(stop-gradient) learns, by binary cross-entropy, whether each token is in its sequence's top-k;
evaluation and export decide by that predictor alone (keep iff its logit > 0), which is causal.
The cross-entropy is the router's `aux_loss` after a training forward; the trainer adds it to the
language-model loss (`ResidualLM.auxiliary_loss`), and it reaches only the predictor.

Executed tokens are gathered into a flat (N, d) batch (`TokenSelection`), so the projections
of a routed sublayer really do (1 - mod_rate) of the work; attention pads them per sequence. A block
acts on `DepthRouter.route`: at evaluation, where no token executes it is the identity and does
nothing else (no gather, no scatter, no key stored), and where every token executes it runs its dense
path. Decoding one token at a time meets only these two cases.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import PREDICTOR_HIDDEN

LEVEL_GAIN = 0.5  # integral gain on the quantile level, per batch
EVAL_MOMENTUM = 0.1  # weight of the newest training threshold in eval_threshold


@dataclass
class TokenSelection:
    """The executed tokens of a (B, T) batch, in ascending (b, t) order.

    Everything but the decision is computed on first use: a decoding step that skips or executes every
    token reads only how many execute, and routed MLPs never pay for the padded layout only attention
    needs (`max_count`, `padded_index`: a host sync and a cumsum).
    """

    keep: Tensor  # (B, T) bool: the routing decision
    skip_all: bool = False  # no token executes, and the caller runs nothing (`DepthRouter.route`)

    @classmethod
    def from_mask(cls, keep: Tensor) -> TokenSelection:
        return cls(keep)

    @functools.cached_property
    def index(self) -> Tensor:
        """(N,) flat index b * T + t into the (B * T) token rows."""
        return self.keep.flatten().nonzero().squeeze(1)

    @functools.cached_property
    def positions(self) -> Tensor:
        """(N,) position t of each token, for RoPE."""
        return self.index % self.keep.shape[1]

    @functools.cached_property
    def counts(self) -> Tensor:
        """(B,) executed tokens per sequence."""
        return self.keep.sum(1)

    @property
    def batch(self) -> int:
        return self.keep.shape[0]

    @functools.cached_property
    def executed(self) -> int:
        """How many tokens execute (a host sync on a GPU, as skipping work there needs)."""
        return int(self.keep.count_nonzero())

    @property
    def is_empty(self) -> bool:
        """No token executes."""
        return self.executed == 0

    @property
    def is_full(self) -> bool:
        """Every token executes."""
        return self.executed == self.keep.numel()

    @functools.cached_property
    def max_count(self) -> int:
        """The longest sequence's executed tokens: the padded layout's length."""
        return int(self.counts.max()) if self.batch else 0

    @functools.cached_property
    def padded_index(self) -> Tensor:
        """(N,) row b * max_count + rank of each executed token in a per-sequence padded layout."""
        rank = (self.keep.cumsum(1) - 1).flatten()[self.index]  # position among its sequence's kept tokens
        return (self.index // self.keep.shape[1]) * self.max_count + rank


@dataclass
class Delta:
    """A sublayer's output: dense (B, T, d) values, (N, d) values on `sel`'s tokens only, or None where
    every token skipped the sublayer."""

    values: Tensor | None
    sel: TokenSelection | None = None

    def added_to(self, x: Tensor) -> Tensor:
        """x + delta, where skipped tokens get nothing added (the identity)."""
        if self.values is None:
            return x
        if self.sel is None:
            return x + self.values
        return x.flatten(0, 1).index_add(0, self.sel.index, self.values).view_as(x)


def gather_tokens(x: Tensor, sel: TokenSelection | None) -> Tensor:
    """(B, T, ...) -> (N, ...): the executed tokens' rows; x itself when every token executes (sel None)."""
    if sel is None:
        return x
    return x.flatten(0, 1).index_select(0, sel.index)  # backward: index_add, not index_put


def lower_quantile(values: Tensor, level: float) -> Tensor:
    """The ceil(level * n)-th smallest value (kthvalue: a selection, no full sort)."""
    k = min(values.numel(), max(1, math.ceil(level * values.numel())))
    return values.float().kthvalue(k).values


class DepthRouter(nn.Module):
    """Decides, from a per-token score, which tokens a routed sublayer executes.

    Records the executed-token counts of its last call (`last_counts`, per sequence), from
    which the model computes its executed FLOPs, and the realised skip rate.
    """

    # Buffers, registered in __init__ (declared here for type checkers).
    threshold: Tensor
    level: Tensor
    eval_threshold: Tensor

    def __init__(self, rate: float, routing: str = "causal_threshold", d_model: int | None = None):
        super().__init__()
        if not 0 < rate < 1:
            raise ValueError(f"mod_rate: router needs 0 < rate < 1, got {rate}")
        if routing == "predictor" and d_model is None:
            raise ValueError("mod_routing='predictor' needs d_model (the predictor reads the router's input)")
        self.rate = rate
        self.routing = routing
        self.predictor = (
            nn.Sequential(nn.Linear(d_model, PREDICTOR_HIDDEN), nn.SiLU(), nn.Linear(PREDICTOR_HIDDEN, 1))
            if routing == "predictor" and d_model is not None
            else None
        )
        self.aux_loss: Tensor | None = None
        self.register_buffer("threshold", torch.tensor(-math.inf))
        self.register_buffer("level", torch.tensor(float(rate)))  # quantile level that hits the rate
        self.register_buffer("eval_threshold", torch.tensor(-math.inf))  # smoothed, for eval and export
        self.last_selection: TokenSelection | None = None

    def select(self, score: Tensor, features: Tensor | None = None) -> TokenSelection:
        """score: (B, T), larger = more worth executing; `features` (B, T, d): the router's input, read by
        the predictor (mod_routing="predictor" only). Returns the executed tokens."""
        score = score.detach()
        if self.aux_loss is not None:  # a module's attribute write costs a decode step more than this read
            self.aux_loss = None
        if self.predictor is not None:
            if features is None:
                raise ValueError("mod_routing='predictor': select() needs the router's input features")
            logits = self.predictor(features.detach()).squeeze(-1)  # (B, T)
            keep = self._topk_mask(score) if self.training else logits > 0
            if self.training:
                self.aux_loss = F.binary_cross_entropy_with_logits(logits.float(), keep.float())
        elif self.routing == "topk":
            keep = self._topk_mask(score)
        else:
            keep = score > (self.threshold if self.training else self.eval_threshold)  # carried in
            if self.training:
                self._update_threshold(score, keep)  # only then learn from this batch
        sel = TokenSelection.from_mask(keep)
        self.last_selection = sel
        return sel

    @property
    def last_counts(self) -> Tensor | None:
        """(B,) tokens each sequence executed in the last call."""
        return None if self.last_selection is None else self.last_selection.counts

    @property
    def last_skip_rate(self) -> Tensor | None:
        """The share of the last call's tokens that skipped."""
        sel = self.last_selection
        return None if sel is None else 1.0 - sel.counts.sum() / sel.keep.numel()

    def route(self, score: Tensor, features: Tensor | None = None) -> TokenSelection | None:
        """`select`, for a block to act on. At evaluation: None when every token executes (the block runs
        densely: no gather, no scatter), `skip_all` when none does (the block is the identity and runs
        nothing). Training always gets the plain selection: an empty one still runs the sublayer on no
        tokens, so that its parameters get zero gradients rather than none."""
        sel = self.select(score, features)
        if self.training:
            return sel
        if sel.is_full:
            return None
        sel.skip_all = sel.is_empty
        return sel

    def _topk_mask(self, score: Tensor) -> Tensor:
        seq_len = score.shape[1]
        k = max(1, round((1.0 - self.rate) * seq_len))
        keep = torch.zeros_like(score, dtype=torch.bool)
        return keep.scatter_(1, score.topk(k, dim=1).indices, True)

    @torch.no_grad()
    def _update_threshold(self, score: Tensor, keep: Tensor) -> None:
        if torch.isfinite(self.threshold):  # the first batch executed everything: nothing to correct
            realised = 1.0 - keep.float().mean()
            self.level.add_(LEVEL_GAIN * (self.rate - realised)).clamp_(0.0, 1.0)
        self.threshold.copy_(lower_quantile(score.flatten(), float(self.level)))
        if torch.isfinite(self.eval_threshold):
            self.eval_threshold.lerp_(self.threshold, EVAL_MOMENTUM)
        else:
            self.eval_threshold.copy_(self.threshold)


class LinearRouter(DepthRouter):
    """Raposo et al. 2024's router for cascaded/ANCRe: score r = w . norm(x), norm the sublayer's RMSNorm.

    With norm(x) = g x / rms(x), rms(x) = sqrt(mean(x^2) + eps), the score is computed as

        r = ((w * g) . x) / rms(x)

    the same function of (w, g, x), with the same gradients, up to rounding; norm(x) is never formed, so a
    token that skips costs one dot product and its RMS, and a sublayer normalises only the tokens it runs.
    The executed output is scaled by sigmoid(r) so that w receives gradient.
    """

    def __init__(self, d_model: int, rate: float, routing: str = "causal_threshold"):
        super().__init__(rate, routing, d_model)
        self.scorer = nn.Linear(d_model, 1, bias=False)

    def score(self, x: Tensor, norm: nn.RMSNorm) -> Tensor:
        """r: (B, T) for the stream x: (B, T, d) that `norm` reads."""
        assert norm.eps is not None  # every norm here is built with eps=1e-6
        inv_rms = torch.rsqrt(x.float().square().mean(-1) + norm.eps)  # (B, T), in at least fp32 as the norm
        return F.linear(x, self.scorer.weight * norm.weight).squeeze(-1) * inv_rms  # (w * g) . x: (B, T)
