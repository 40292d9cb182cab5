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
stored rungs (for `nas show`, export and the dashboard), by the fit or by the top rung carried
forward, whichever the search's own backtest ranks better (`nas.backtest`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .backtest import Backtest, backtest, rung_below_top
from .extrapolate import RungPoint, StudyFit, fit_study, leave_one_out
from .pareto import Cost, pareto_rows
from .promotion import Candidate, should_promote
from .store import RungRow, Store, StoreError, TrialRow, call_with_retries, retry_window
from .study import optuna_storage

__all__ = [
    "REPLICA_PATH",
    "Prediction",
    "RungDecider",
    "RungDecision",
    "at_target",
    "fit_group",
    "front_at_target",
    "predict_search",
    "predict_search_with_backtest",
    "rung_points",
]

log = logging.getLogger(__name__)
BAND_LEVEL = 0.8  # the central 80% interval
REPLICA_PATH = "replica path"  # the exponent group of every replica rung (`fit_group`)


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
    predictor: str = "fit"  # or "top rung" (nas.backtest)


@dataclass(frozen=True)
class RungDecision:
    promote: bool
    predicted_loss: float
    band: tuple[float, float] | None = None  # given with the trial's final decision only


def fit_group(residual: str | None, replica: bool) -> str:
    """The exponent group of a rung: its family on a budget ladder, REPLICA_PATH for every replica rung.

    Replica rungs all lie on their targets' tokens-per-parameter paths, along which loss-vs-compute
    curves are parallel in log compute (Gadre et al., arXiv 2403.08540), so they share one exponent;
    on `make fidelity`'s replica rungs one shared exponent ranked the configs at T better than one per
    family (Kendall tau 0.61 vs 0.50, every rung of seed 0; 0.65 vs 0.42 with both seeds)."""
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
    """The study's fit, or None when there is nothing to fit (no finite loss yet)."""
    if not any(math.isfinite(p.loss) for p in points):
        return None
    return fit_study(points)


def _predict(fit: StudyFit | None, trial: int, target: float) -> float:
    if fit is None or trial not in fit.trials:
        return math.inf
    return fit.predict(trial, target)


def predict_search(rows: Sequence[RungRow], target: float, *, band: bool = True) -> dict[int, Prediction]:
    """Every trial's Prediction at `target` from all of the search's rung rows, by the predictor its
    backtest chose (`nas.backtest`)."""
    return predict_search_with_backtest(rows, target, band=band)[0]


def predict_search_with_backtest(
    rows: Sequence[RungRow], target: float, *, band: bool = True
) -> tuple[dict[int, Prediction], Backtest]:
    """(every trial's Prediction at `target`, the backtest that chose the predictor).

    Under the fit a trial's prediction is the fit's at `target` with its bootstrap band; under "top rung"
    it is the mean loss at the trial's top rung, with no band (low = high = that loss)."""
    points = rung_points(rows)
    fit = _fit(points)
    reached: dict[int, int] = {}
    for r in rows:
        reached[r.number] = max(reached.get(r.number, 0), r.rung + 1)
    loo = {n: leave_one_out(points, n) if reached[n] >= 2 else None for n in sorted(reached)}
    check = backtest([r for r in loo.values() if r is not None], rung_below_top(points))
    top = _top_rung_means(points)
    out = {}
    for number in sorted(reached):
        error = loo[number].error if loo[number] else None
        if check.chosen == "top rung":
            loss = top.get(number, math.inf)
            out[number] = Prediction(loss, loss, loss, reached[number], "top rung", error, "top rung")
            continue
        loss = _predict(fit, number, target)
        low, high = fit.band(number, target, level=BAND_LEVEL) if band and fit and math.isfinite(loss) else (loss, loss)
        group = fit.params(number)[3] if fit and number in fit.trials else "-"
        out[number] = Prediction(loss, low, high, reached[number], group, error, "fit")
    return out, check


def _top_rung_means(points: Sequence[RungPoint]) -> dict[int, float]:
    """Each trial's mean finite loss at its highest rung budget."""
    by_trial: dict[int, dict[float, list[float]]] = {}
    for p in points:
        if math.isfinite(p.loss):
            by_trial.setdefault(p.trial, {}).setdefault(p.flops, []).append(p.loss)
    return {t: sum(r[max(r)]) / len(r[max(r)]) for t, r in by_trial.items()}


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
