"""The level at T: a curve fitted on a few configs measured at lower budgets, carrying every top rung to T.

A search that trains every config once at its top rung C_top knows how configs compare there, not the loss each
will reach at the target T. Its level comes from a few configs (`level configs`) also measured at two or three
budgets C_k below the top rung, on the target's tokens-per-parameter path, where loss follows one curve per config
with a shared floor and exponent (Gadre et al., arXiv 2403.08540):

    L_i(C) = E + A_i C^-alpha

so that a trial's loss at the top rung carries to T as

    L_i(T) = E + (L_i(C_top) - delta - E) (C_top / T)^alpha

where delta is the top rung's own offset from that path (its replicas may narrow otherwise than the level rungs,
which stay on the path; `LevelPrior.offset`, measured across corpora).

**Fit.** Each level config contributes its seed-mean loss at every level budget and at the top rung (less delta),
each weighted by its number of seeds. Three budgets span a factor of four or five in compute, too little to pin
alpha by itself (`make fidelity` reports the free exponent beside the protocol's, `alpha_free`), so alpha has a
prior N(alpha0, alpha_sd) measured across corpora (the exponent that carries their level configs to their truth),
and E is free. For each alpha of a grid, (E, A_i) are the weighted least-squares solution (linear in them) with E's
standard error from sigma; the grid's weights are the posterior exp(-SSE / (2 sigma^2)) x prior(alpha), sigma the
seed noise, or the points' scatter about the best curve where that is larger (a config that does not follow the
shared curve then widens the posterior rather than pinning alpha). A prediction is the posterior mean of L_i(T), and
its sd the posterior spread (over alpha, and E at each alpha), with delta's sd and the level's error across corpora
that no fit sees (`LevelPrior.systematic_sd`) added.

**The level configs** (`choose_level_configs`) are chosen for spread in size: with k of them, the trials at the
quantiles (2j + 1) / 2k of the parameter count (the smallest sixth's, the median's and the largest sixth's for
three), among those whose level rungs stay on the target's path (`benchmarks/README.md` says how the rule was
chosen and checked).

**No curve** where the points cannot support one: fewer than `MIN_CONFIGS` configs with a point below the top
rung (two such configs give four points for three parameters, E and two A_i, so a residual degree of freedom is
always left). The answer then says that its losses are the top rung's, not losses at T.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ALPHA_GRID",
    "MIN_CONFIGS",
    "LevelCurve",
    "LevelPoint",
    "LevelPrior",
    "NoCurve",
    "choose_level_configs",
    "fit_level",
]

ALPHA_GRID = np.linspace(0.02, 0.8, 157)  # exponents the posterior is evaluated on (step 0.005)
MIN_CONFIGS = 2  # configs with >= 2 budgets below which no curve is fitted


@dataclass(frozen=True)
class LevelPoint:
    """One level config's loss `loss` (nats/token, the mean of `seeds` seeds) at training budget `flops`."""

    trial: int
    flops: float
    loss: float
    seeds: int = 1


@dataclass(frozen=True)
class LevelPrior:
    """What the level rests on beyond a search's own points, measured across corpora: the exponent's prior
    (alpha, alpha_sd), the top rung's offset from the level rungs' path (offset, offset_sd; nats), and the sd of
    the level's error that a fit does not see (`systematic_sd`, nats at T)."""

    alpha: float = 0.17
    alpha_sd: float = 0.03
    offset: float = 0.0
    offset_sd: float = 0.0
    systematic_sd: float = 0.0
    source: str = "none"


@dataclass(frozen=True)
class NoCurve:
    """Why there is no level at T."""

    reason: str

    def describe(self) -> str:
        return f"no loss at T: {self.reason}; each loss is its top rung's"


@dataclass(frozen=True, eq=False)
class LevelCurve:
    """The fitted curve (module docstring): posterior weights over ALPHA_GRID, E and its variance at each alpha,
    the top rung's budget, the prior, the configs and points it rests on."""

    weights: np.ndarray
    floors: np.ndarray  # E at each alpha
    floor_vars: np.ndarray  # Var(E) at each alpha
    top_flops: float
    prior: LevelPrior
    configs: tuple[int, ...]
    points: int
    budgets: tuple[float, ...]

    @property
    def alpha(self) -> float:
        """The posterior mean exponent."""
        return float(self.weights @ ALPHA_GRID)

    @property
    def floor(self) -> float:
        """The posterior mean floor E."""
        return float(self.weights @ self.floors)

    def carry(self, top_loss: float, target: float) -> tuple[float, float]:
        """(mean, sd) of a loss measured at the top rung, carried to `target` training FLOPs (module docstring)."""
        c = (self.top_flops / target) ** ALPHA_GRID
        level = top_loss - self.prior.offset
        at = self.floors + (level - self.floors) * c
        mean = float(self.weights @ at)
        spread = float(self.weights @ ((at - mean) ** 2 + (1.0 - c) ** 2 * self.floor_vars))
        offset = math.sqrt(float(self.weights @ c**2)) * self.prior.offset_sd
        return mean, math.sqrt(spread + offset**2 + self.prior.systematic_sd**2)

    def factor(self, target: float) -> float:
        """The posterior mean of (C_top / T)^alpha: how a difference at the top rung carries to T."""
        return float(self.weights @ (self.top_flops / target) ** ALPHA_GRID)

    def describe(self) -> str:
        budgets = ", ".join(f"{b:.3g}" for b in self.budgets)
        return (
            f"the level at T from {len(self.configs)} configs (trials {', '.join(map(str, self.configs))}) at "
            f"{budgets} training FLOPs and the top rung: L = E + A C^-alpha, E {self.floor:.3f}, alpha "
            f"{self.alpha:.3f} (prior {self.prior.alpha:.3f} ± {self.prior.alpha_sd:.3f}, {self.prior.source})"
        )


def fit_level(
    points: Sequence[LevelPoint],
    top: Mapping[int, LevelPoint],
    noise: float,
    prior: LevelPrior,
) -> LevelCurve | NoCurve:
    """The level curve (module docstring) from the level configs' `points` below the top rung and every level
    config's top rung in `top` (trial -> its point there); `noise`: the sd of one run's loss (the seed noise)."""
    usable = [p for p in points if math.isfinite(p.loss) and p.trial in top and math.isfinite(top[p.trial].loss)]
    budgets: dict[int, set[float]] = {}
    for p in usable:
        budgets.setdefault(p.trial, set()).add(p.flops)
    configs = sorted(budgets)  # each with a point below the top rung and its top: with two, a degree of freedom left
    if len(configs) < MIN_CONFIGS:
        return NoCurve(f"{len(configs)} config(s) measured below the top rung, {MIN_CONFIGS} needed for a curve")
    top_flops = top[configs[0]].flops
    rows = [p for p in usable if p.trial in configs]
    rows += [LevelPoint(t, top[t].flops, top[t].loss - prior.offset, top[t].seeds) for t in configs]
    fit = _posterior(rows, configs, top_flops, max(noise, 1e-6), prior)
    all_budgets = tuple(sorted({p.flops for p in rows if p.flops < top_flops * (1 - 1e-9)}))
    return LevelCurve(*fit, top_flops, prior, tuple(configs), len(rows), all_budgets)


def _posterior(rows, configs, top_flops, noise, prior):
    """(weights, E, Var E) over ALPHA_GRID: at each alpha the weighted least squares in (E, a_i), x = C / C_top.

    The likelihood's sd is the seed noise, or where the points scatter about the best curve by more than it
    (SSE / (n - configs - 2) > sigma^2: a config that does not follow one shared curve), that scatter, so that a
    misfit widens the posterior instead of pinning alpha where it fits worst."""
    index = {t: k for k, t in enumerate(configs)}
    x = np.array([p.flops / top_flops for p in rows])
    y = np.array([p.loss for p in rows])
    w = np.array([float(p.seeds) for p in rows])
    member = np.zeros((len(rows), len(configs)))
    member[np.arange(len(rows)), [index[p.trial] for p in rows]] = 1.0
    sses, floors, pinv_floor = [], [], []
    for alpha in ALPHA_GRID:
        design = np.hstack([np.ones((len(rows), 1)), member * (x**-alpha)[:, None]])
        weighted = design * np.sqrt(w)[:, None]
        coef, *_ = np.linalg.lstsq(weighted, y * np.sqrt(w), rcond=None)
        sses.append(float((w * (y - design @ coef) ** 2).sum()))
        floors.append(coef[0])
        pinv_floor.append(max(float(np.linalg.pinv(weighted.T @ weighted)[0, 0]), 0.0))
    sse = np.array(sses)
    dof = len(rows) - len(configs) - 2
    scatter = float(sse.min()) / dof if dof > 0 else 0.0
    variance = max(noise**2, scatter)
    log_post = -sse / (2 * variance) - (ALPHA_GRID - prior.alpha) ** 2 / (2 * prior.alpha_sd**2)
    weights = np.exp(log_post - log_post.max())
    return weights / weights.sum(), np.array(floors), np.array(pinv_floor) * variance


def choose_level_configs(sizes: Mapping[int, float], count: int) -> list[int]:
    """`count` trials spread in size (module docstring): among `sizes` (trial -> parameter count, the eligible
    trials only), those at the quantiles (2j + 1) / (2 count) of the size order (ties by trial number)."""
    ordered = sorted(sizes, key=lambda t: (sizes[t], t))
    if count >= len(ordered):
        return ordered
    chosen: list[int] = []
    for j in range(count):
        index = round((2 * j + 1) / (2 * count) * (len(ordered) - 1))
        pick = next((t for t in ordered[index:] + ordered[:index][::-1] if t not in chosen), None)
        if pick is not None:
            chosen.append(pick)
    return chosen
