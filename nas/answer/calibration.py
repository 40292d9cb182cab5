"""Bands that mean what they say: split-conformal intervals, calibrated on the search's own backtest.

An uncalibrated interval from a scaling fit covers far less than it claims (61% for a nominal 95% in one study;
docs/design.md §5), so a band here is a claim checked on the search's own data. The backtest
(`nas.answer.backtest`) predicted each multi-rung trial's highest rung from the rungs below it, a known distance
d = ln(C_to / C_from) in log compute; its conformity score is

    s = |observed - predicted| / d^GAMMA,

the error per unit of extrapolation. With n scores, q is the ceil((n + 1) level)-th smallest (split conformal:
Vovk et al. 2005; Angelopoulos and Bates, arXiv 2107.07511), and a trial whose prediction at T rests on its
rung at budget C gets the band

    prediction -/+ q ln(T / C)^GAMMA    (its lower end at least 0).

If the scores are exchangeable with the trials' errors at T after this scaling, the band holds the truth with
probability >= level. They are only approximately so (the backtest steps are eta, the step to T is ~10x),
which is why `make fidelity` measures the coverage on runs trained at T. With fewer scores than
`min_scores(level)` (4 for 80%) no finite quantile exists: the band is "uncalibrated: n trials".

GAMMA = 1 would treat the error as growing in proportion to the distance carried (an error of slope), 0.5 as a
random walk's; `make fidelity` measures the coverage of 1, 0.75 and 0.5 on both corpora
(benchmarks/results/fidelity.json, `band_coverage_by_gamma`): 0.75 was chosen on the plays at a search's default
ladder, as the one whose coverage is nearest the level, and the Python-source corpus checks it out of sample.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["BAND_LEVEL", "GAMMA", "Calibration", "calibrate", "coverage", "min_scores"]

BAND_LEVEL = 0.8  # the central 80% interval
GAMMA = 0.75


def min_scores(level: float) -> int:
    """The fewest scores for which split conformal has a finite `level` quantile: ceil((n + 1) level) <= n."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1) (got {level})")
    return math.ceil(level / (1.0 - level) - 1e-12)


@dataclass(frozen=True)
class Calibration:
    """The conformal quantile `q` of the scores (None: uncalibrated), how many scores, at which level."""

    q: float | None
    n: int
    level: float = BAND_LEVEL
    gamma: float = GAMMA

    @property
    def calibrated(self) -> bool:
        return self.q is not None

    def band(self, predicted: float, from_flops: float, to_flops: float) -> tuple[float, float] | None:
        """The band of a prediction carried from a rung at `from_flops` to `to_flops`; None if uncalibrated."""
        if self.q is None or not math.isfinite(predicted):
            return None
        half = self.q * math.log(to_flops / from_flops) ** self.gamma
        return max(0.0, predicted - half), predicted + half

    def describe(self) -> str:
        if self.q is None:
            return f"bands uncalibrated: {self.n} trials with a held-out rung, {min_scores(self.level)} needed"
        return (
            f"{self.level:.0%} bands calibrated on {self.n} held-out rungs: "
            f"+/- {self.q:.3g} nats per ln(T / C){'' if self.gamma == 1 else f'^{self.gamma:g}'}"
        )


def calibrate(
    errors: Sequence[tuple[float, float, float]], level: float = BAND_LEVEL, gamma: float = GAMMA
) -> Calibration:
    """The Calibration of backtest `errors`, each (predicted - observed, from_flops, to_flops)."""
    scores = sorted(abs(e) / math.log(to / frm) ** gamma for e, frm, to in errors if math.isfinite(e) and to > frm > 0)
    n = len(scores)
    if n < min_scores(level):
        return Calibration(None, n, level, gamma)
    return Calibration(float(scores[math.ceil((n + 1) * level) - 1]), n, level, gamma)


def coverage(bands: Mapping[int, tuple[float, float] | None], truth: Mapping[int, float]) -> float | None:
    """The share of the keys with a band whose truth lies inside it (None if no key has both)."""
    hits = [lo <= truth[k] <= hi for k, b in bands.items() if b is not None and k in truth for lo, hi in [b]]
    return float(np.mean(hits)) if hits else None
