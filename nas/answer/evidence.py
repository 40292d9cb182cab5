"""Which evidence a trial's prediction at the target rests on: the rungs' measured reliability, and two predictors.

A search measures trials at rungs of growing budget; a trial stops at the rung where promotion leaves it. The
study's curve (`nas.answer.extrapolate`: L_i(C) = E + A_i C^-alpha, E and alpha shared) carries a loss measured at a
rung's budget to the target's; what sets each trial's level A_i is the question of this module.

Rung reliability (after Hyper-Tune, Li et al., arXiv 2201.06834, which weighs each fidelity by how well it
orders trials as the highest one does): rung r's reliability is Kendall's tau-a between the trials' losses at
rung r and at rung r + 1, over the trials that reached r + 1 (seed means; `pairwise_tau`). A rung
with fewer than `MIN_PAIRS` such pairs is unmeasured. Its weight is

    lambda_r = max(tau_r, 0)   (a rung that orders no better than chance carries nothing),

the highest rung of the study weighs 1 (nothing above it to check it by: the best evidence there is), and an
unmeasured rung below it weighs nothing: evidence is leaned on only where it has been shown to hold.

The two predictors, each the curve with the trials' levels solved again (`StudyFit.reanchored`):

- `TOP_RUNG`: all the weight on the trial's highest rung. Trials stopped at the same rung rank as their
  losses there; the curve puts trials stopped at different rungs on one scale. At equal compute, ranking at
  the largest budget trained beats extrapolating from smaller ones (DataDecide, arXiv 2504.11393).
- `WEIGHTED_FIT`: every rung of the trial, weighted by its reliability (the trial's own highest rung never
  below `FLOOR`, so that a trial has a level).

A search answers with the weighted fit only where its own backtest shows it orders held-out rungs better
(`nas.answer.backtest`).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .extrapolate import RungPoint, StudyFit, budget_key

__all__ = [
    "FLOOR",
    "MIN_PAIRS",
    "TOP_RUNG",
    "WEIGHTED_FIT",
    "Predictor",
    "RungReliability",
    "basis",
    "pairwise_tau",
    "predict_at",
    "predictor_weights",
    "rung_means",
    "rung_reliability",
]

Predictor = Literal["top rung", "weighted fit"]
TOP_RUNG: Predictor = "top rung"
WEIGHTED_FIT: Predictor = "weighted fit"
MIN_PAIRS = 3  # pairs below which a rung's reliability, or a backtest, says nothing
FLOOR = 1e-3  # the least weight of a trial's own highest rung under the weighted fit

Means = dict[int, dict[float, float]]  # trial -> rung budget -> mean finite loss over seeds


@dataclass(frozen=True)
class RungReliability:
    """Rung `flops`: how it orders the trials that reached the next rung (`tau` over `pairs`; None if
    unmeasured) and the weight it gets."""

    flops: float
    tau: float | None
    pairs: int
    weight: float


def rung_means(points: Sequence[RungPoint]) -> Means:
    """Each trial's mean finite loss at each rung budget (a seed measured twice counts once)."""
    runs: dict[tuple[int, float, int], list[float]] = defaultdict(list)
    for p in points:
        if math.isfinite(p.loss):
            runs[(p.trial, budget_key(p.flops), p.seed)].append(p.loss)
    seeds: dict[int, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (trial, flops, _), losses in runs.items():
        seeds[trial][flops].append(sum(losses) / len(losses))
    return {t: {c: sum(v) / len(v) for c, v in r.items()} for t, r in seeds.items()}


def pairwise_tau(predicted: Mapping[int, float], observed: Mapping[int, float], group: Mapping[int, float]):
    """(tau, pairs): (concordant - discordant) / pairs over pairs of keys in the same group (Kendall's tau-a)."""
    score, pairs = 0.0, 0
    for a, b in itertools.combinations(sorted(observed), 2):
        if group[a] != group[b]:
            continue
        pairs += 1
        score += float(np.sign(predicted[a] - predicted[b]) * np.sign(observed[a] - observed[b]))
    return (score / pairs if pairs else None), pairs


def rung_reliability(points: Sequence[RungPoint]) -> dict[float, RungReliability]:
    """The reliability and weight of every rung budget of the study (module docstring)."""
    means = rung_means(points)
    budgets = sorted({c for r in means.values() for c in r})
    out = {}
    for i, flops in enumerate(budgets):
        if i == len(budgets) - 1:
            out[flops] = RungReliability(flops, None, 0, 1.0)
            continue
        above = budgets[i + 1]
        both = [t for t, r in means.items() if flops in r and above in r]
        tau, pairs = pairwise_tau(
            {t: means[t][flops] for t in both}, {t: means[t][above] for t in both}, dict.fromkeys(both, 0.0)
        )
        measured = tau is not None and pairs >= MIN_PAIRS
        weight = max(tau, 0.0) if measured and tau is not None else 0.0
        out[flops] = RungReliability(flops, tau if measured else None, pairs, weight)
    return out


def predictor_weights(
    predictor: Predictor, points: Sequence[RungPoint], reliability: Mapping[float, RungReliability] | None = None
) -> Callable[[int, float], float]:
    """weight(trial, rung budget) under `predictor`, for `StudyFit.reanchored`."""
    tops = {t: max(r) for t, r in rung_means(points).items()}
    if predictor == TOP_RUNG:
        return lambda trial, flops: 1.0 if budget_key(flops) == tops.get(trial) else 0.0
    rel = reliability if reliability is not None else rung_reliability(points)

    def weight(trial: int, flops: float) -> float:
        w = rel[budget_key(flops)].weight if budget_key(flops) in rel else 0.0
        return max(w, FLOOR) if budget_key(flops) == tops.get(trial) else w

    return weight


def predict_at(
    fit: StudyFit, predictor: Predictor, points: Sequence[RungPoint], flops: float, reliability=None
) -> dict[int, float]:
    """Every fitted trial's loss at `flops` by `predictor`."""
    anchored = fit.reanchored(predictor_weights(predictor, points, reliability))
    return {t: anchored.predict(t, flops) for t in anchored.trials}


def basis(predictor: Predictor, trial_rungs: Sequence[float], reliability: Mapping[float, RungReliability]) -> str:
    """How one trial's prediction was made, in a few words: the rungs it rests on and their weights."""
    budgets = sorted(budget_key(c) for c in trial_rungs)
    if predictor == TOP_RUNG or len(budgets) == 1:
        return f"rung {len(budgets) - 1} on the curve"
    weights = [reliability[c].weight if c in reliability else 0.0 for c in budgets]
    weights[-1] = max(weights[-1], FLOOR)
    return f"rungs 0-{len(budgets) - 1} weighted " + "/".join(f"{w:.2g}" for w in weights)
