"""Answering at the target budget: each trial's predicted loss at T from its rungs, and promotion between rungs.

Every trial is measured on a budget ladder (`workers.budget`): the worker trains one run through the
rungs and, at each, calls `RungDecider` (given to it by the search). The decider

1. stores the rung's result (`Store.record_rung`: written once, at once, so it survives a killed
   trial or driver),
2. fits loss versus training compute over the search's rung rows (`nas.extrapolate`: L = E + A C^-alpha,
   alpha and E shared by a family, A per trial) and predicts each trial's loss at the target T,
3. promotes the trial to the next rung only if it is among the best ceil(n / eta) of the n trials
   that reached this rung, by non-dominated sorting on (predicted loss at T, executed FLOPs per
   token) (`nas.promotion`, MO-ASHA). Those predictions use only points up to this rung, so
   trials that climbed higher are not favoured by their extra rungs.

The prediction of the trial's last rung is what Optuna is told; with it, the decider writes the
prediction's band, the rungs climbed and the target into the Optuna trial's user attributes
(`target_loss_band`, `rungs_climbed`, `target_flops`), while the trial is still running.
`predict_search` recomputes every trial's prediction with a band and a leave-one-out error from all
stored rungs (for `nas show`, export and the dashboard).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .extrapolate import RungPoint, StudyFit, fit_study, leave_one_out
from .promotion import Candidate, should_promote
from .store import RungRow, Store, TrialRow
from .study import optuna_storage

__all__ = ["Prediction", "RungDecider", "RungDecision", "at_target", "predict_search", "rung_points"]

log = logging.getLogger(__name__)
BAND_LEVEL = 0.8  # the central 80% interval


@dataclass(frozen=True)
class Prediction:
    """A trial's predicted loss at the target with its band, the rungs it reached, and how well its
    lower rungs predicted its top one (None below two rungs)."""

    loss: float
    low: float
    high: float
    rungs: int
    group: str
    loo_error: float | None


@dataclass(frozen=True)
class RungDecision:
    promote: bool
    predicted_loss: float
    band: tuple[float, float] | None = None  # given with the trial's final decision only


def rung_points(rows: Sequence[RungRow], up_to_rung: int | None = None) -> list[RungPoint]:
    """The fit's points: one per stored rung (and seed), at the rung's training budget."""
    return [
        RungPoint(
            trial=r.number,
            family=r.residual or "unknown",
            flops=r.budget_flops,
            loss=math.inf if r.val_loss is None else r.val_loss,
            seed=r.seed,
        )
        for r in rows
        if up_to_rung is None or r.rung <= up_to_rung
    ]


def _fit(points: list[RungPoint]) -> StudyFit | None:
    """The study's fit, or None when there is nothing to fit (no finite loss yet)."""
    if not any(math.isfinite(p.loss) for p in points):
        return None
    return fit_study(points)


def _predict(fit: StudyFit | None, trial: int, target: float) -> float:
    if fit is None or trial not in fit.trials:
        return math.inf
    return fit.predict(trial, target)


def predict_search(rows: Sequence[RungRow], target: float, *, band: bool = True) -> dict[int, Prediction]:
    """Every trial's Prediction at `target` from all of the search's rung rows."""
    points = rung_points(rows)
    fit = _fit(points)
    reached: dict[int, int] = {}
    for r in rows:
        reached[r.number] = max(reached.get(r.number, 0), r.rung + 1)
    out = {}
    for number in sorted(reached):
        loss = _predict(fit, number, target)
        low, high = fit.band(number, target, level=BAND_LEVEL) if band and fit and math.isfinite(loss) else (loss, loss)
        loo = leave_one_out(points, number) if reached[number] >= 2 else None
        group = fit.params(number)[3] if fit and number in fit.trials else "-"
        out[number] = Prediction(loss, low, high, reached[number], group, loo.error if loo else None)
    return out


def at_target(rows: Sequence[TrialRow], predictions: dict[int, Prediction]) -> list[TrialRow]:
    """The rows with `val_loss` replaced by the predicted loss at the target, for fronts and hypervolumes
    at the target (`nas.pareto`); a row without a prediction keeps inf there and so never sits on them."""
    return [replace(r, val_loss=predictions[r.number].loss if r.number in predictions else math.inf) for r in rows]


@dataclass
class RungDecider:
    """What a worker calls at each rung (picklable: Ray ships it to the trial's process).

    `__call__(number, seed, flops_per_token, result)` stores the rung, and says whether trial
    `number` goes on to the next rung and what it predicts at the target now.
    """

    store_url: str
    search: str
    target_flops: float
    eta: float
    n_rungs: int
    optuna_study: str | None = None  # the study whose trials get the band as user attributes

    def __post_init__(self) -> None:
        self._store: Store | None = None
        self._optuna = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_store": None, "_optuna": None}  # each process opens its own connections

    def __call__(self, number: int, seed: int, flops_per_token: float, result: dict) -> RungDecision:
        if self._store is None:
            self._store = Store(self.store_url)
        self._store.record_rung(self.search, number, seed, result)
        rung = int(result["rung"])
        rows = self._store.rungs(self.search)
        fit = _fit(rung_points(rows, up_to_rung=rung))
        predicted = _predict(fit, number, self.target_flops)
        if rung >= self.n_rungs - 1 or not math.isfinite(predicted):
            return self._final(number, rung, fit, predicted)
        at_rung = {r.number: r for r in rows if r.rung == rung}
        candidates = [
            Candidate(
                n,
                _predict(fit, n, self.target_flops),
                flops_per_token if n == number else (row.executed_flops_per_token or math.inf),
            )
            for n, row in at_rung.items()
        ]
        if should_promote(number, candidates, self.eta):
            return RungDecision(True, predicted)
        return self._final(number, rung, fit, predicted)

    def _final(self, number: int, rung: int, fit: StudyFit | None, predicted: float) -> RungDecision:
        """The trial stops here: its band, also written to its Optuna trial (which is still running)."""
        band = fit.band(number, self.target_flops, level=BAND_LEVEL) if fit and math.isfinite(predicted) else None
        if self.optuna_study is not None:
            attrs = {"target_flops": self.target_flops, "rungs_climbed": rung + 1}
            attrs["target_loss_band"] = list(band) if band else None
            self._set_optuna_attrs(number, attrs)
        return RungDecision(False, predicted, band)

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
