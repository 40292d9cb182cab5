"""Which predictor a search answers with at the target: the fit, or the top rung carried forward.

A search predicts each trial's loss at the target T either by the fit along its rungs
(`nas.extrapolate`: L = E + A C^-alpha) or by carrying the trial's top measured rung forward (its mean
loss there, the ranking a plain successive-halving search would give). Which is better is an empirical
question of the search's own data, answered by a backtest that never looks at T: for every trial with
at least two rungs, hold out its top rung and predict it

- by the fit, refitted without that rung (`extrapolate.leave_one_out`), and
- by carrying forward the trial's rung below it.

Each predictor is scored by its pairwise ranking agreement with the held-out losses, over the pairs of
trials whose held-out rungs have the same budget (the only pairs whose losses are comparable):
tau = (concordant - discordant) / pairs, Kendall's tau-a on those pairs. The fit is chosen unless the
carried rung ranks strictly better; below `MIN_PAIRS` comparable pairs there is no backtest, and the fit
is used and said to be unchecked.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .extrapolate import LooResult

__all__ = ["MIN_PAIRS", "Backtest", "Predictor", "backtest", "pairwise_tau", "rung_below_top"]

Predictor = Literal["fit", "top rung"]
MIN_PAIRS = 3  # comparable pairs below which a backtest says nothing


@dataclass(frozen=True)
class Backtest:
    """The predictor chosen, each predictor's held-out ranking agreement and mean absolute error, and how
    many trials and comparable pairs the backtest saw (taus are None without a backtest)."""

    chosen: Predictor
    fit_tau: float | None
    carry_tau: float | None
    fit_mae: float | None
    carry_mae: float | None
    trials: int
    pairs: int

    @property
    def checked(self) -> bool:
        return self.fit_tau is not None

    def describe(self) -> str:
        """One line for `nas show`, the dashboard and the export."""
        if not self.checked:
            return f"predictor: {self.chosen} (unchecked: {self.pairs} comparable backtest pairs, needs {MIN_PAIRS})"
        return (
            f"predictor: {self.chosen}, by backtest on {self.trials} trials ({self.pairs} pairs) predicting each "
            f"top rung from the rungs below: fit tau {self.fit_tau:+.2f} (MAE {self.fit_mae:.3f} nats), "
            f"top rung carried tau {self.carry_tau:+.2f}"
        )


def pairwise_tau(predicted: Mapping[int, float], observed: Mapping[int, float], group: Mapping[int, float]):
    """(tau, pairs): (concordant - discordant) / pairs over pairs of keys in the same group."""
    score, pairs = 0.0, 0
    for a, b in itertools.combinations(sorted(observed), 2):
        if group[a] != group[b]:
            continue
        pairs += 1
        score += float(np.sign(predicted[a] - predicted[b]) * np.sign(observed[a] - observed[b]))
    return (score / pairs if pairs else None), pairs


def backtest(loo: Sequence[LooResult], below_top: Mapping[int, float]) -> Backtest:
    """The Backtest of the leave-one-out results `loo` (one per multi-rung trial) against carrying forward
    `below_top[trial]`, each trial's mean loss at the rung below its top one."""
    usable = [r for r in loo if math.isfinite(r.predicted) and math.isfinite(r.observed) and r.trial in below_top]
    observed = {r.trial: r.observed for r in usable}
    fitted = {r.trial: r.predicted for r in usable}
    carried = {r.trial: below_top[r.trial] for r in usable}
    groups = {r.trial: float(f"{r.flops:.9g}") for r in usable}
    fit_tau, pairs = pairwise_tau(fitted, observed, groups)
    carry_tau, _ = pairwise_tau(carried, observed, groups)
    if pairs < MIN_PAIRS or fit_tau is None or carry_tau is None:
        return Backtest("fit", None, None, None, None, len(usable), pairs)
    chosen: Predictor = "top rung" if carry_tau > fit_tau else "fit"
    return Backtest(
        chosen,
        fit_tau,
        carry_tau,
        float(np.mean([abs(fitted[t] - observed[t]) for t in observed])),
        float(np.mean([abs(carried[t] - observed[t]) for t in observed])),
        len(usable),
        pairs,
    )


def rung_below_top(points: Sequence) -> dict[int, float]:
    """Each trial's mean finite loss at the rung below its top one (trials with >= 2 rungs)."""
    by_trial: dict[int, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for p in points:
        if math.isfinite(p.loss):
            by_trial[p.trial][float(f"{p.flops:.9g}")].append(p.loss)
    out = {}
    for trial, rungs in by_trial.items():
        if len(rungs) >= 2:
            out[trial] = float(np.mean(rungs[sorted(rungs)[-2]]))
    return out
