"""A search with planted effects, written through the store's own API into a real SQLite file (no training): what the
tests of `nas effects`, its export and its dashboard page read.

40 trials of a space of depth, width, family, MoD rate and learning rate, each climbing 3 rungs of a budget ladder
on L(C) = level + 60 C^-0.25, seed 1 measured again at the top rung 0.004 nats apart. A trial's level is a size
trend in ln parameters, plus ANCRE_EFFECT for ancre, plus a little scatter: nag, the learning rate and the MoD rate
do nothing."""

from __future__ import annotations

import math

import numpy as np

from nas.store import Store
from search_spaces.residual_lm import ArchConfig, flops_per_token
from workers.training.records import RungRecord
from workers.trial.contract import CountedCosts
from workers.trial.result import TrialResult

ANCRE_EFFECT = 0.05  # nats at T, ancre against cascaded
C0, ETA, RUNGS = 1e10, 3.0, 3
TARGET = 10 * C0 * ETA ** (RUNGS - 1)
SPACE = {
    "family": "residual_lm",
    "fixed": {"vocab_size": 256, "seq_len": 64, "n_heads": 2},
    "params": {
        "n_layers": {"int": {"low": 2, "high": 8}},
        "d_model": {"categorical": [64, 96, 128]},
        "residual": {"categorical": ["cascaded", "nag", "ancre"]},
        "mod_rate": {"categorical": [0.0, 0.5]},
        "lr": {"float": {"low": 0.001, "high": 0.01, "log": True}},
    },
}
BUDGET = {"trial_flops": C0, "search_flops": 40 * C0, "rungs": RUNGS, "eta": ETA, "ladder": "budget",
          "target_flops": TARGET}  # fmt: skip


def planted_search(url: str, name: str = "planted", trials: int = 40, seed: int = 0) -> None:
    """Write the search (module docstring) into the store at `url`."""
    rng = np.random.default_rng(seed)
    with Store(url) as store:
        store.create_search(name, requested_trials=trials, budget=BUDGET, space=SPACE, settings={},
                            optuna_study_name=None, code_version="test")  # fmt: skip
        for number in range(trials):
            knobs = {
                "n_layers": int(rng.integers(2, 9)),
                "d_model": int(rng.choice([64, 96, 128])),
                "residual": str(rng.choice(["cascaded", "nag", "ancre"])),
                "mod_rate": float(rng.choice([0.0, 0.5])),
                "lr": float(math.exp(rng.uniform(math.log(1e-3), math.log(1e-2)))),
            }
            cfg = ArchConfig(**SPACE["fixed"], **{k: v for k, v in knobs.items() if k != "lr"})
            flops = flops_per_token(cfg).executed
            level = 2.0 - 0.15 * math.log(cfg.d_model**2 * cfg.n_layers / 1e5) + ANCRE_EFFECT * (
                knobs["residual"] == "ancre") + rng.normal(0.0, 0.003)  # fmt: skip
            trial = store.start_trial(
                name, number=number, config=knobs, optuna_trial_number=number, costs=CountedCosts(flops)
            )
            for rung in range(RUNGS):
                budget = C0 * ETA**rung
                for repeat in (0, 1) if rung == RUNGS - 1 else (0,):
                    loss = level + 60 * budget**-0.25 + 0.004 * repeat + rng.normal(0.0, 0.002)
                    record = RungRecord(rung, repeat, budget, 10, int(budget / flops / 3), loss, budget)
                    store.record_rung(name, number, record)
            store.finish_trial(trial, TrialResult.loss_only(loss, flops))
        store.set_search_status(name, "completed")
