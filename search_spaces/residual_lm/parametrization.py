"""How initialisation, AdamW learning rates and forward multipliers scale with width and depth.

`standard`: GPT-2's rules. Every matrix starts at N(0, sigma^2), sigma = 0.02, the sublayers' output
projections at sigma / sqrt(2L); one AdamW learning rate for all of them (NAG's gates and alphas
at a capped rate). The best learning rate then moves with width and depth, so a search that
compares sizes at one rate partly compares how well each size suits that rate.

`completep`: muP in width (Yang et al. 2022, arXiv 2203.03466) with CompleteP in depth (Dey et
al. 2025, arXiv 2505.01618, alpha = 1), relative to a base shape (d_0 = `base_width`, L_0 =
`base_depth`) at which it equals `standard` exactly. With m_d = d / d_0 and m_L = L / L_0, every
tensor is classified by which of its dimensions grow with width (muP's "infinite" dimensions,
found by building the same model at width 2d on the meta device, as the `mup` package does with
base shapes):

    kind       grows with width      examples                      init std      lr        wd        eps
    hidden     fan-in and fan-out    qkv, out_proj, w_in, w_out    s / m_d^1/2   lr / m_d  wd m_d    eps / (m_d m_L)
    readout    fan-in only           MoD router, NAG gate, pred.   s / m_d       lr / m_d  wd m_d    eps / m_d
    input      fan-out only          embedding, norm gains         s             lr        wd        eps
    finite     nothing               NAG alpha, ANCRe logits       as built      lr        wd        eps
    unembed    fan-in only           lm_head (or the tied table)   s             lr        wd        eps

where s is the tensor's `standard` init at the base depth (the output projections' s / sqrt(2 L_0):
under CompleteP depth enters through the branch multiplier only). Weight decay scales with m_d
so that AdamW's per-step shrink lr * wd is width-free. The unembedding is a readout whose 1/m_d
sits in the forward pass (muP's output multiplier) so that a tied table can keep the embedding's
rules. Forward multipliers:

    logits        W_U norm(z) / m_d                 cascaded, ANCRe (NAG's head already divides
                                                    by d with unit-RMS rows: muP as built)
    branches      x + f(x) / m_L                    cascaded, ANCRe (CompleteP, alpha = 1)
    NAG rotation  tan(theta) = c_L alpha_l m        c_L = S(2 L_0) / S(2 L), S(n) = sum_{l<=n} l^-1/2
    attention     softmax(q.k sqrt(hd_0) / hd)      hd_0 = d_0 / n_heads (or base_head_dim): 1/sqrt(hd) at the base

NAG's branch is a rotation of a unit-RMS stream: its size does not depend on the sublayer's output
scale, so 1/m_L has nothing to act on. What grows with depth is the total rotation sum_l alpha_l,
and c_L holds that sum at init to its base value (alpha_l = l^-1/2 makes it grow like sqrt(L)).
The gate's C pre-activations read the d-wide stream: a readout. ANCRe's mixing logits are
finite (their number grows with depth, each is a scalar in a softmax over a convex combination
of states, which keeps the stream's scale whatever L is). The MoD predictor's second layer
(32 -> 1) is finite.

The rules read plain data, never a model: the config, and per parameter a `TensorGrowth` saying
which of its dimensions grow with width and whether it is the embedding or the unembedding.
`build_model` records that for every model it builds (`model.width_growth`), then initialises it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

from .config import ArchConfig

INIT_STD = 0.02  # GPT-2 / nanoGPT

TensorKind = Literal["hidden", "readout", "input", "finite", "unembed"]
TensorRole = Literal["embedding", "unembedding"]  # the two tensors whose kind is not read from their shape


class TensorGrowth(NamedTuple):
    """How one parameter grows with the width d (muP's "infinite" dimensions)."""

    fan_out: bool  # dimension 0 grows (a matrix is (out, in); a vector has only this one)
    fan_in: bool  # dimension 1 grows
    role: TensorRole | None = None


@dataclass(frozen=True)
class TensorRule:
    """One tensor's scaling under the model's parametrization (every factor 1.0 under `standard`)."""

    kind: TensorKind
    init_scale: float  # multiplies the tensor's `standard` init std at the base depth
    lr_scale: float  # multiplies the AdamW learning rate
    weight_decay_scale: float
    eps_scale: float


class Described(Protocol):
    """What `tensor_rules` reads from a model: its config and its parameters' growth, plain data."""

    @property
    def cfg(self) -> ArchConfig: ...

    @property
    def width_growth(self) -> Mapping[str, TensorGrowth]: ...


def width_multiplier(cfg: ArchConfig) -> float:
    """m_d = d / d_0 under `completep`, 1 under `standard`."""
    return cfg.d_model / cfg.base_width if cfg.parametrization == "completep" else 1.0


def depth_multiplier(cfg: ArchConfig) -> float:
    """m_L = L / L_0 under `completep`, 1 under `standard`."""
    return cfg.n_layers / cfg.base_depth if cfg.parametrization == "completep" else 1.0


def logit_multiplier(cfg: ArchConfig) -> float:
    """muP's output multiplier 1/m_d on the unembedding (cascaded and ANCRe heads)."""
    return 1.0 / width_multiplier(cfg)


def branch_multiplier(cfg: ArchConfig) -> float:
    """CompleteP's residual-branch multiplier 1/m_L (alpha = 1; cascaded and ANCRe sublayers)."""
    return 1.0 / depth_multiplier(cfg)


def _inverse_sqrt_sum(n: int) -> float:
    return sum(k**-0.5 for k in range(1, n + 1))


def nag_rotation_multiplier(cfg: ArchConfig) -> float:
    """c_L = S(2 L_0) / S(2 L): NAG's total initial rotation sum_l alpha_l held at its base value."""
    if cfg.parametrization != "completep":
        return 1.0
    return _inverse_sqrt_sum(2 * cfg.base_depth) / _inverse_sqrt_sum(2 * cfg.n_layers)


def attention_scale(cfg: ArchConfig) -> float | None:
    """The q.k scale: None (SDPA's 1/sqrt(hd)) under `standard`, sqrt(hd_0) / hd under `completep`."""
    base_head_dim = cfg.base_head_dim or cfg.base_width / cfg.n_heads
    if cfg.parametrization != "completep" or cfg.head_dim == base_head_dim:
        return None  # the same value, left to SDPA so that the base shape is bit-exact `standard`
    return math.sqrt(base_head_dim) / cfg.head_dim


def standard_init_std(name: str, init_std: float, depth: int) -> float:
    """GPT-2's init: sigma, and sigma / sqrt(2 depth) for the sublayers' output projections."""
    if name.endswith(("out_proj.weight", "w_out.weight")):
        return init_std / math.sqrt(2 * depth)
    return init_std


def init_std(cfg: ArchConfig, name: str, rule: TensorRule) -> float:
    """A matrix's init std: `standard_init_std` at depth L under `standard`; under `completep` at the
    base depth L_0 (depth enters through the branch multiplier), times the tensor's width rule."""
    depth = cfg.base_depth if cfg.parametrization == "completep" else cfg.n_layers
    return standard_init_std(name, INIT_STD, depth) * rule.init_scale


def tensor_kind(growth: TensorGrowth) -> TensorKind:
    """The row of the table a tensor falls in, from which of its dimensions grow with width."""
    if growth.role == "embedding":  # also a tied unembedding: it keeps the embedding's rules (the head has 1/m_d)
        return "input"
    if growth.role == "unembedding":
        return "unembed"
    if growth.fan_out and growth.fan_in:
        return "hidden"
    if growth.fan_in:
        return "readout"
    return "input" if growth.fan_out else "finite"


def tensor_rule(cfg: ArchConfig, growth: TensorGrowth) -> TensorRule:
    """One tensor's `TensorRule` (see the module docstring for the table)."""
    if cfg.parametrization == "standard":
        return TensorRule("finite", 1.0, 1.0, 1.0, 1.0)  # nothing scales with width
    m_d, m_l = width_multiplier(cfg), depth_multiplier(cfg)
    kind = tensor_kind(growth)
    if kind == "hidden":
        return TensorRule("hidden", m_d**-0.5, 1.0 / m_d, m_d, 1.0 / (m_d * m_l))
    if kind == "readout":
        return TensorRule("readout", 1.0 / m_d, 1.0 / m_d, m_d, 1.0 / m_d)
    return TensorRule(kind, 1.0, 1.0, 1.0, 1.0)


def tensor_rules(model: Described) -> dict[str, TensorRule]:
    """Every parameter's `TensorRule`, by name, from `model.cfg` and `model.width_growth`."""
    return {name: tensor_rule(model.cfg, growth) for name, growth in model.width_growth.items()}
