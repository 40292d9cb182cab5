"""The rung gate a search gives its workers: store the rung, then decide whether the trial climbs on.

`StoreRungGate` is the search's `workers.trial.contract.RungGate`: the one place a worker process touches the
store and Optuna's storage. Called at the end of each rung of trial `number`, it

1. stores the rung (`Store.record_rung`: written once, at once, so it survives a killed trial or driver);
2. decides from the study's stored rungs (`nas.answer.rung_decision.decide_rung`);
3. with the trial's final verdict, writes the prediction's band, the rungs climbed and the target into the
   Optuna trial's user attributes (`target_loss_band`, `rungs_climbed`, `target_flops`) while it still runs.

It is picklable (Ray ships it to the trial's process); the connections are opened there, on first use, with
the store's retries (the server may be restarting).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from workers.training.records import RungRecord
from workers.trial.contract import RungVerdict, Verdict

from ..answer.rung_decision import PromotionRule, decide_rung
from ..store import Store, StoreError, call_with_retries, retry_window
from .study import optuna_storage

__all__ = ["StoreRungGate"]

log = logging.getLogger(__name__)


@dataclass
class StoreRungGate:
    """The rung gate of search `search` in the store at `store_url` (module docstring)."""

    store_url: str
    search: str
    rule: PromotionRule
    optuna_study: str | None = None  # the study whose trials get the band as user attributes

    def __post_init__(self) -> None:
        self._store: Store | None = None
        self._optuna = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_store": None, "_optuna": None}  # each process opens its own connections

    def __call__(self, trial: int, flops_per_token: float, rung: RungRecord) -> RungVerdict:
        store = self._open()
        store.record_rung(self.search, trial, rung)
        verdict = decide_rung(self.rule, store.rungs(self.search), trial, rung.rung, flops_per_token)
        if verdict.verdict == Verdict.STOP and self.optuna_study is not None:
            band = list(verdict.band) if verdict.band else None
            self._set_optuna_attrs(
                trial,
                {"target_flops": self.rule.target_flops, "rungs_climbed": rung.rung + 1, "target_loss_band": band},
            )
        return verdict

    def _open(self) -> Store:
        if self._store is None:
            self._store = call_with_retries(
                lambda: Store(self.store_url),
                window=retry_window(),
                where="(rung writes)",
                what="open the store",
                cause=lambda err: err.__cause__ if isinstance(err, StoreError) else None,
            )
        return self._store

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
