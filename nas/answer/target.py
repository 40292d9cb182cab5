"""The search's answer at the target budget: each trial's predicted loss at T from its rungs, and the front there.

`answer_at_target(rows, target)` is the study's answer from its rungs alone (what the rung decisions rank by): the
study's curve (`nas.answer.extrapolate`), each trial's level set by the predictor its backtest chose
(`nas.answer.backtest`: its highest rung unless the reliability-weighted fit of all its rungs orders held-out rungs
better, `nas.answer.evidence`), a band calibrated on that backtest (`nas.answer.calibration`), and each prediction's
basis. With one rung per trial there is no curve: each prediction is its top rung's loss, said as such
(`Prediction.at_target` False). A search's answer adds what `nas.answer.forecast` knows beyond the rungs: the top
rung's bias taken out, the level at T, and one error model for every band and call. `front_at_target` is the front
of (predicted loss, cost) the search recommends.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..store import RungRow, TrialRow
from .backtest import Backtest, backtest
from .calibration import BAND_LEVEL, Calibration, calibrate
from .discrepancy import Discrepancy
from .error_model import BAND_Z, ErrorModel, TrialFacts
from .evidence import TOP_RUNG, RungReliability, basis, predictor_weights, rung_means, rung_reliability
from .extrapolate import NONE, RungPoint, StudyFit, fit_study, seed_noise, seed_noise_dof
from .level import LevelCurve, NoCurve
from .pareto import Cost, pareto_rows

__all__ = [
    "BAND_LEVEL",
    "REPLICA_PATH",
    "Answer",
    "Prediction",
    "answer_at_target",
    "at_target",
    "fit_group",
    "front_at_target",
    "predict_search",
    "rung_points",
]

REPLICA_PATH = "replica path"  # the exponent group of every replica rung (`fit_group`)


@dataclass(frozen=True)
class Prediction:
    """A trial's predicted loss, its 80% band (None: no band), the rungs it reached, its curve group, the held-out
    error of its highest rung (None below two rungs), the predictor and, in a few words, what the prediction rests
    on (`nas.answer.evidence.basis`). `at_target`: the loss is carried to T by a curve (False: it is the top
    rung's, no curve carried it); `sd` its total standard deviation and `relative_sd` the part that is the trial's
    own (what a comparison between trials sees; `nas.answer.error_model`), None where no model gave them."""

    loss: float
    low: float | None
    high: float | None
    rungs: int
    group: str
    loo_error: float | None
    predictor: str = TOP_RUNG
    basis: str = ""
    at_target: bool = True
    sd: float | None = None
    relative_sd: float | None = None


@dataclass(frozen=True)
class Answer:
    """The search's answer at the target: every trial's Prediction, the backtest that chose the predictor, the
    bands' calibration, each rung's reliability, the study's seed noise (None without repeated seeds) and the
    degrees of freedom it rests on, its curve's exponents, and each trial's curve L = E + A C^-alpha with A as the
    predictor set it."""

    predictions: dict[int, Prediction]
    backtest: Backtest
    calibration: Calibration
    reliability: dict[float, RungReliability] = field(default_factory=dict)
    noise: float | None = None
    exponents: dict[str, float] = field(default_factory=dict)  # curve group -> its alpha
    curves: dict[int, tuple[float, float, float, str]] = field(default_factory=dict)  # trial -> (E, A, alpha, group)
    highest: dict[int, float] = field(default_factory=dict)  # trial -> the budget of its highest finite rung
    target: float | None = None
    discrepancy: Discrepancy | None = None  # the anchors' correction, taken out of `predictions` (None: not asked)
    model: ErrorModel | None = None  # the error model every band and call reads (None: the study's rungs alone)
    facts: dict[int, TrialFacts] = field(default_factory=dict)  # what each prediction rests on, for its calls
    centre: float = 0.0  # the study's mean aspect: the bias correction is taken around it
    level: LevelCurve | NoCurve | None = None  # the level at T (None: a ladder's own curve, or not asked)
    factors: dict[int, float] = field(default_factory=dict)  # trial -> how a top-rung difference carries to T
    noise_dof: int = 0  # the degrees of freedom of `noise`: sum (seeds - 1) over the repeated rungs

    def noise_at_target(self, trial: int) -> float | None:
        """The seed noise of `trial`'s prediction at T: the study's seed noise at a rung, carried from its highest
        rung to T by the curve's slope, (C / T)^alpha (None without repeated seeds)."""
        if self.noise is None or trial not in self.highest or self.target is None:
            return None
        alpha = self.exponents.get(self.predictions[trial].group, 0.0) if trial in self.predictions else 0.0
        return self.noise * (self.highest[trial] / self.target) ** alpha

    @property
    def at_target(self) -> bool:
        """Whether the losses stated are losses at T (carried by a curve), not the top rung's."""
        return bool(self.predictions) and all(p.at_target for p in self.predictions.values())

    def gap_sd(self, a: int, b: int) -> float | None:
        """The sd of the difference of two trials' predictions (`nas.answer.error_model`); None without a model."""
        if self.model is None or a not in self.facts or b not in self.facts:
            return None
        factor = (self.factors.get(a, 1.0) + self.factors.get(b, 1.0)) / 2.0
        noise = self.model.noise(self.noise, self.noise_dof)
        variance = self.model.gap_variance(self.facts[a], self.facts[b], self.centre, noise)
        return factor * math.sqrt(variance)

    def margin(self, a: int, b: int) -> float | None:
        """The gap beyond which the two trials' order is called resolved: the error model's call z times the gap's
        sd; without a model, twice the larger of their seed noises at T (None: neither is known)."""
        sd = self.gap_sd(a, b)
        if sd is not None and self.model is not None:
            return self.model.call_z * sd
        noises = [n for n in (self.noise_at_target(a), self.noise_at_target(b)) if n is not None]
        return 2.0 * max(noises) if noises else None

    def tied(self, a: int, b: int) -> bool:
        """Whether two trials' predictions differ by less than their margin (`margin`; never tied without one)."""
        margin = self.margin(a, b)
        return margin is not None and abs(self.predictions[a].loss - self.predictions[b].loss) < margin


def fit_group(residual: str | None, replica: bool) -> str:
    """The exponent group of a rung: its family on a budget ladder, REPLICA_PATH for every replica rung.

    Replica rungs all lie on their targets' tokens-per-parameter paths, along which loss-vs-compute
    curves are parallel in log compute (Gadre et al., arXiv 2403.08540), so they share one exponent;
    on `make fidelity`'s replica rungs one shared exponent ranked the configs at T better than one per
    family (benchmarks/README.md)."""
    return REPLICA_PATH if replica else residual or "unknown"


def rung_points(rows: Sequence[RungRow], up_to_rung: int | None = None) -> list[RungPoint]:
    """The fit's points: one per stored rung (and seed), at the rung's training budget, grouped by
    `fit_group`."""
    return [
        RungPoint(
            trial=r.number,
            family=fit_group(r.residual, r.is_replica),
            flops=r.budget_flops,
            loss=math.inf if r.val_loss is None else r.val_loss,
            seed=r.seed,
        )
        for r in rows
        if up_to_rung is None or r.rung <= up_to_rung
    ]


def _fit(points: list[RungPoint]) -> StudyFit | None:
    """The study's curve, or None when there is nothing to fit (no finite loss yet)."""
    if not any(math.isfinite(p.loss) for p in points):
        return None
    return fit_study(points)


def answer_at_target(rows: Sequence[RungRow], target: float) -> Answer:
    """The study's Answer at `target` from its rung rows alone (module docstring); a search's answer is
    `nas.answer.forecast.forecast_at_target`."""
    points = rung_points(rows)
    reached: dict[int, int] = {}
    for r in rows:
        reached[r.number] = max(reached.get(r.number, 0), r.rung + 1)
    check = backtest(points)
    fit = _fit(points)
    reliability = rung_reliability(points)
    anchored = fit.reanchored(predictor_weights(check.chosen, points, reliability)) if fit else None
    predicted = {t: anchored.predict(t, target) for t in anchored.trials} if anchored else {}
    calibration = calibrate([(h.error(check.chosen), h.from_flops, h.to_flops) for h in check.held_out])
    means, held = rung_means(points), {h.trial: h for h in check.held_out}
    out = {}
    for number in sorted(reached):
        loss = predicted.get(number, math.inf)
        mine = means.get(number, {})
        interval = calibration.band(loss, max(mine), target) if mine else None
        group = fit.params(number)[3] if fit and number in fit.trials else "-"
        out[number] = Prediction(
            loss,
            interval[0] if interval else None,
            interval[1] if interval else None,
            reached[number],
            group,
            held[number].error(check.chosen) if number in held else None,
            check.chosen,
            basis(check.chosen, list(mine), reliability) if mine else "no finite loss",
            at_target=group not in (NONE, "-"),
            sd=(interval[1] - interval[0]) / 2.0 / BAND_Z if interval else None,
        )
    exponents = {label: g.alpha for label, g in fit.groups.items()} if fit else {}
    curves = {t: anchored.params(t) for t in anchored.trials} if anchored else {}
    highest = {t: max(r) for t, r in means.items() if r}
    noise, dof = seed_noise(points), seed_noise_dof(points)
    return Answer(out, check, calibration, reliability, noise, exponents, curves, highest, target, noise_dof=dof)


def predict_search(rows: Sequence[RungRow], target: float) -> dict[int, Prediction]:
    """Every trial's Prediction at `target` (`answer_at_target`)."""
    return answer_at_target(rows, target).predictions


def at_target(rows: Sequence[TrialRow], predictions: dict[int, Prediction]) -> list[TrialRow]:
    """The rows with `val_loss` replaced by the predicted loss at the target, for fronts and hypervolumes
    at the target (`nas.answer.pareto`); a row without a prediction keeps inf there and so never sits on them."""
    return [replace(r, val_loss=predictions[r.number].loss if r.number in predictions else math.inf) for r in rows]


def front_at_target(
    rows: Sequence[TrialRow], predictions: dict[int, Prediction], key: Cost | None = None, also: Sequence[Cost] = ()
) -> list[TrialRow]:
    """The search's answer: the completed trials non-dominated by (predicted loss at the target, cost, *also),
    as rows carrying that predicted loss, sorted by cost (`nas.answer.pareto.pareto_rows`, cost `key`; `also`:
    the search's further costs, `nas.space.objectives.front_costs`). Without predictions (a single-budget
    search) it is the front of the measured losses."""
    return pareto_rows(at_target(rows, predictions) if predictions else rows, key=key, also=also)
