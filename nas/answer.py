"""Answering at the target budget: each trial's predicted loss at T from its rungs, and promotion between rungs.

Every trial is measured on a ladder of rungs (replicas, `workers.replica`, or a budget ladder,
`workers.plans`): the worker calls `RungDecider` (given to it by the search) at each rung. The decider

1. stores the rung's result (`Store.record_rung`: written once, at once, so it survives a killed
   trial or driver),
2. predicts each trial's loss at the target T from the study's points up to this rung (`answer_at_target`),
   so that trials which climbed higher are not favoured by their extra rungs,
3. promotes the trial to the next rung only if it is among the best ceil(n / eta) of the n trials that
   reached this rung, by non-dominated sorting on (predicted loss at T, executed FLOPs per token)
   (`nas.promotion`, MO-ASHA), or if it is tied with that cut within twice the study's seed noise. On a
   replica ladder a tied trial first measures the rung again with a second seed (`REMEASURE_SEED_OFFSET`),
   and is promoted if the seed mean is still tied; the first trials to report do so too until the study has
   `NOISE_REPEATS` repeated rungs, so that the noise is measured, not assumed. A budget ladder (one run
   branched at each rung) cannot measure a rung again: its ties are promoted.

The prediction of the trial's last rung is what Optuna is told; with it, the decider writes the prediction's
band, the rungs climbed and the target into the Optuna trial's user attributes (`target_loss_band`,
`rungs_climbed`, `target_flops`), while the trial is still running.

`answer_at_target` is the search's answer from all stored rungs (for `nas show`, export, repeats and the
dashboard): the study's curve (`nas.extrapolate`), each trial's level set by the predictor its backtest chose
(`nas.backtest`: its highest rung unless the reliability-weighted fit of all its rungs orders held-out rungs
better, `nas.evidence`), a band calibrated on that backtest (`nas.calibration`), and each prediction's basis.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .backtest import Backtest, backtest
from .calibration import BAND_LEVEL, Calibration, calibrate
from .evidence import TOP_RUNG, RungReliability, basis, predictor_weights, rung_means, rung_reliability
from .extrapolate import RungPoint, StudyFit, fit_study, seed_noise
from .pareto import Cost, pareto_rows
from .promotion import Candidate, promotable, tied_with_cut
from .store import RungRow, Store, StoreError, TrialRow, call_with_retries, retry_window
from .study import optuna_storage

__all__ = [
    "BAND_LEVEL",
    "NOISE_REPEATS",
    "REMEASURE_SEED_OFFSET",
    "REPLICA_PATH",
    "Answer",
    "Prediction",
    "RungDecider",
    "RungDecision",
    "answer_at_target",
    "at_target",
    "fit_group",
    "front_at_target",
    "predict_search",
    "rung_points",
]

log = logging.getLogger(__name__)
REPLICA_PATH = "replica path"  # the exponent group of every replica rung (`fit_group`)
REMEASURE_SEED_OFFSET = 1000  # a rung measured again runs seed + this (the front's repeats use seed + 1, + 2, ...)
NOISE_REPEATS = 2  # repeated rungs the study needs before its seed noise is trusted for ties


@dataclass(frozen=True)
class Prediction:
    """A trial's predicted loss at the target, its calibrated band (None: uncalibrated), the rungs it reached,
    its curve group, the held-out error of its highest rung (None below two rungs), the predictor and, in a
    few words, what the prediction rests on (`nas.evidence.basis`)."""

    loss: float
    low: float | None
    high: float | None
    rungs: int
    group: str
    loo_error: float | None
    predictor: str = TOP_RUNG
    basis: str = ""


@dataclass(frozen=True)
class Answer:
    """The search's answer at the target: every trial's Prediction, the backtest that chose the predictor, the
    bands' calibration, each rung's reliability, the study's seed noise (None without repeated seeds), its
    curve's exponents, and each trial's curve L = E + A C^-alpha with A as the predictor set it."""

    predictions: dict[int, Prediction]
    backtest: Backtest
    calibration: Calibration
    reliability: dict[float, RungReliability] = field(default_factory=dict)
    noise: float | None = None
    exponents: dict[str, float] = field(default_factory=dict)  # curve group -> its alpha
    curves: dict[int, tuple[float, float, float, str]] = field(default_factory=dict)  # trial -> (E, A, alpha, group)
    highest: dict[int, float] = field(default_factory=dict)  # trial -> the budget of its highest finite rung
    target: float | None = None

    def noise_at_target(self, trial: int) -> float | None:
        """The seed noise of `trial`'s prediction at T: the study's seed noise at a rung, carried from its highest
        rung to T by the curve's slope, (C / T)^alpha (None without repeated seeds)."""
        if self.noise is None or trial not in self.highest or self.target is None:
            return None
        alpha = self.exponents.get(self.predictions[trial].group, 0.0) if trial in self.predictions else 0.0
        return self.noise * (self.highest[trial] / self.target) ** alpha

    def tied(self, a: int, b: int) -> bool:
        """Whether two trials' predictions at T differ by less than twice the larger of their noises there."""
        noises = [n for n in (self.noise_at_target(a), self.noise_at_target(b)) if n is not None]
        gap = abs(self.predictions[a].loss - self.predictions[b].loss)
        return bool(noises) and gap < 2.0 * max(noises)


@dataclass(frozen=True)
class RungDecision:
    promote: bool
    predicted_loss: float
    band: tuple[float, float] | None = None  # given with the trial's final decision only
    measure_again: bool = False  # measure this rung again with another seed, then ask again


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
            family=fit_group(r.residual, r.d_model is not None),
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
    """The search's Answer at `target` from its rung rows (module docstring)."""
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
        out[number] = Prediction(
            loss,
            interval[0] if interval else None,
            interval[1] if interval else None,
            reached[number],
            fit.params(number)[3] if fit and number in fit.trials else "-",
            held[number].error(check.chosen) if number in held else None,
            check.chosen,
            basis(check.chosen, list(mine), reliability) if mine else "no finite loss",
        )
    exponents = {label: g.alpha for label, g in fit.groups.items()} if fit else {}
    curves = {t: anchored.params(t) for t in anchored.trials} if anchored else {}
    highest = {t: max(r) for t, r in means.items() if r}
    return Answer(out, check, calibration, reliability, seed_noise(points), exponents, curves, highest, target)


def _repeated_rungs(rows: Sequence[RungRow]) -> int:
    """How many (trial, rung) pairs have been measured with more than one seed."""
    seeds: dict[tuple[int, int], set[int]] = {}
    for r in rows:
        if r.val_loss is not None and math.isfinite(r.val_loss):
            seeds.setdefault((r.number, r.rung), set()).add(r.seed)
    return sum(len(s) >= 2 for s in seeds.values())


def predict_search(rows: Sequence[RungRow], target: float) -> dict[int, Prediction]:
    """Every trial's Prediction at `target` (`answer_at_target`)."""
    return answer_at_target(rows, target).predictions


def at_target(rows: Sequence[TrialRow], predictions: dict[int, Prediction]) -> list[TrialRow]:
    """The rows with `val_loss` replaced by the predicted loss at the target, for fronts and hypervolumes
    at the target (`nas.pareto`); a row without a prediction keeps inf there and so never sits on them."""
    return [replace(r, val_loss=predictions[r.number].loss if r.number in predictions else math.inf) for r in rows]


def front_at_target(
    rows: Sequence[TrialRow], predictions: dict[int, Prediction], key: Cost | None = None
) -> list[TrialRow]:
    """The search's answer: the completed trials non-dominated by (predicted loss at the target, cost), as
    rows carrying that predicted loss, sorted by cost (`nas.pareto.pareto_rows`, cost `key`). Without
    predictions (a single-budget search) it is the front of the measured losses."""
    return pareto_rows(at_target(rows, predictions) if predictions else rows, key=key)


@dataclass
class RungDecider:
    """What a worker calls at each rung (picklable: Ray ships it to the trial's process).

    `__call__(number, seed, flops_per_token, result)` stores the rung (as measured with `seed`), and says
    whether trial `number` goes on to the next rung, measures this one again (only with `remeasure`: a
    replica ladder), or stops, and what it predicts at the target now.
    """

    store_url: str
    search: str
    target_flops: float
    eta: float
    n_rungs: int
    optuna_study: str | None = None  # the study whose trials get the band as user attributes
    remeasure: bool = False  # a rung can be measured again with another seed (replica rungs: each its own run)
    noise_rule: bool = True  # ties within twice the seed noise promoted / measured again (off: plain MO-ASHA)

    def __post_init__(self) -> None:
        self._store: Store | None = None
        self._optuna = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_store": None, "_optuna": None}  # each process opens its own connections

    def __call__(self, number: int, seed: int, flops_per_token: float, result: dict) -> RungDecision:
        if self._store is None:  # opened in the trial's process, where the server may be restarting
            self._store = call_with_retries(
                lambda: Store(self.store_url),
                window=retry_window(),
                where="(rung writes)",
                what="open the store",
                cause=lambda err: err.__cause__ if isinstance(err, StoreError) else None,
            )
        self._store.record_rung(self.search, number, seed, result)
        rung = int(result["rung"])
        every = self._store.rungs(self.search)
        rows = [r for r in every if r.rung <= rung]
        answer = answer_at_target(rows, self.target_flops)
        predicted = answer.predictions[number].loss
        if rung >= self.n_rungs - 1 or not math.isfinite(predicted):
            return self._final(number, rung, every)
        candidates = self._candidates(rows, rung, answer, number, flops_per_token)
        if number in promotable(candidates, self.eta):
            return RungDecision(True, predicted)
        if not self.noise_rule:
            return self._final(number, rung, every)
        measured_twice = len({r.seed for r in rows if r.number == number and r.rung == rung}) >= 2
        again = self.remeasure and not measured_twice
        if tied_with_cut(number, candidates, self.eta):  # within the noise of the cut: a coin flip
            return RungDecision(False, predicted, None, True) if again else RungDecision(True, predicted)
        if again and _repeated_rungs(rows) < NOISE_REPEATS:
            return RungDecision(False, predicted, None, True)  # the study's noise is not measured yet
        return self._final(number, rung, every)

    def _candidates(
        self, rows: list[RungRow], rung: int, answer: Answer, number: int, flops_per_token: float
    ) -> list[Candidate]:
        """The trials at `rung`: predicted loss at T, FLOPs per token and the margin of twice the study's seed
        noise carried to T (the curve's slope (C_r / T)^alpha; 0 while the noise is unmeasured)."""
        at_rung = {r.number: r for r in rows if r.rung == rung}
        noise = answer.noise if _repeated_rungs(rows) >= NOISE_REPEATS else None
        out = []
        for n, row in at_rung.items():
            p = answer.predictions[n]
            slope = (row.budget_flops / self.target_flops) ** answer.exponents.get(p.group, 0.0)
            margin = 2.0 * noise * slope if noise is not None else 0.0
            flops = flops_per_token if n == number else (row.executed_flops_per_token or math.inf)
            out.append(Candidate(n, p.loss, flops, margin if math.isfinite(p.loss) else 0.0))
        return out

    def _final(self, number: int, rung: int, rows: list[RungRow]) -> RungDecision:
        """The trial stops here: its prediction and band (None while uncalibrated) from every stored rung, the
        band also written to its Optuna trial."""
        p = answer_at_target(rows, self.target_flops).predictions[number]
        band = (p.low, p.high) if p.low is not None and p.high is not None else None
        if self.optuna_study is not None:
            attrs = {"target_flops": self.target_flops, "rungs_climbed": rung + 1}
            attrs["target_loss_band"] = list(band) if band else None
            self._set_optuna_attrs(number, attrs)
        return RungDecision(False, p.loss, band)

    def _set_optuna_attrs(self, number: int, attrs: dict) -> None:
        """Best effort: the attributes inform, so a trial Optuna already closed (a driver killed and the
        search resumed) or a study that is gone is logged and the trial goes on."""
        if self._optuna is None:
            self._optuna = optuna_storage(self.store_url)
        storage = self._optuna
        try:
            study_id = storage.get_study_id_from_name(self.optuna_study)
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
            for key, value in attrs.items():
                storage.set_trial_user_attr(trial_id, key, value)
        except (KeyError, RuntimeError) as err:  # UpdateFinishedTrialError is a RuntimeError
            log.warning("trial %d: band not written to Optuna study %s: %s", number, self.optuna_study, err)
