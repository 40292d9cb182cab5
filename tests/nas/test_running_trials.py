"""The two running-search rules on the search's own path, in seconds (the same watched on a whole `nas search` are in
test_running_search.py, marked slow): a trial's row carries its counted FLOPs from the moment the driver opens it,
still carries them when it finishes, and a rung decision reads them for a running peer; and `--early-stop`'s
stopper, told the progress reports a real trial makes, stops the trial that learns nothing against its FLOP band."""

from __future__ import annotations

import math

import pytest

from nas.answer.rung_decision import PromotionRule
from nas.search.early_stop import FlopBandStopper
from nas.search.spool import StartedTrial
from nas.search.study import DefineByRun
from nas.search.trainable import PROGRESS_KEY, TrialPlanner
from nas.space import space_from_dict
from nas.space.budget import Budget
from nas.store import Store, default_url
from workers.data.config import DataConfig
from workers.ladder.trial_plan import LadderPlan
from workers.status import TrialStatus
from workers.training.records import RungRecord
from workers.trial.contract import split_config, with_ticket
from workers.trial.execute import run_request

SPACE = space_from_dict({
    "family": "residual_lm",
    "fixed": {"vocab_size": 256, "seq_len": 32, "batch_size": 4, "n_layers": 2, "n_heads": 2, "mlp_ratio": 2.0,
              "residual": "cascaded", "eval_sequences": 8, "evals": 4},
    "params": {"lr": {"categorical": [1.0e-2, 1.0e-6]}, "d_model": {"categorical": [32, 64]}},
})  # fmt: skip
BUDGET = Budget(trial_flops=2e9, trials=5, rungs=1, min_tokens_per_param=None)


def ticket(number: int, **knobs):
    """The trial's Tune config as the search hands it over (define-by-run knobs and the ticket), and the ticket
    the driver reads back from it."""
    config = with_ticket(knobs, DefineByRun(SPACE, BUDGET).ticket(number, knobs))
    return config, split_config(config)[1]


def test_a_running_trial_row_carries_its_counted_flops_and_a_rung_decision_reads_them(tmp_path):
    with Store(default_url(tmp_path)) as store:
        store.create_search("s", requested_trials=2, budget={}, space={}, settings={}, optuna_study_name=None,
                            code_version=None)  # fmt: skip
        rows = {}
        for number, width in ((0, 64), (1, 32)):
            config, t = ticket(number, lr=1e-2, d_model=width)
            knobs, _ = split_config(config)
            rows[number] = StartedTrial(number, 0, knobs, t.costs).open_row(store, "s")  # as on_trial_start does
        running = {r.number: r for r in store.trials("s", statuses=[TrialStatus.RUNNING])}
        counted = {n: ticket(n, lr=1e-2, d_model=w)[1].costs.executed_flops_per_token for n, w in ((0, 64), (1, 32))}
        assert {n: r.executed_flops_per_token for n, r in running.items()} == counted
        assert all(math.isfinite(f) and f > 0 for f in counted.values())
        # trial 1 reaches its rung while trial 0 runs: the rule ranks 0 on its stored FLOPs, not as infinitely dear
        from nas.answer.rung_decision import _candidates
        from nas.answer.target import answer_at_target

        for number in (0, 1):
            store.record_rung("s", number, RungRecord(0, 0, 2e9, 10, 1000, 3.0 - 0.1 * number, 2e9))
        rule = PromotionRule(2e10, 2.0, 2)
        peers = _candidates(rule, store.rungs("s"), 0, answer_at_target(store.rungs("s"), 2e10), 1, counted[1])
        assert {c.trial: c.flops for c in peers} == counted
        config, t = ticket(1, lr=1e-2, d_model=32)
        outcome = run_request(TrialPlanner(DataConfig(cache_dir=str(tmp_path)), 0, LadderPlan(2e8)).request(t))
        store.finish_trial(rows[1], outcome.result)
        final = {r.number: r for r in store.trials("s")}
    assert final[1].status == TrialStatus.COMPLETED
    assert final[1].executed_flops_per_token is not None and final[1].executed_flops_per_token == counted[1]
    assert final[0].executed_flops_per_token == counted[0]  # still running, still counted


@pytest.mark.parametrize("order", [(1e-2, 1e-2, 1e-2, 1e-6), (1e-2, 1e-6, 1e-2, 1e-2)])
def test_the_flop_band_stopper_stops_the_trial_that_learns_nothing_from_its_real_reports(tmp_path, order):
    stopper, stopped = FlopBandStopper(), {}
    planner = TrialPlanner(DataConfig(cache_dir=str(tmp_path)), 0, LadderPlan(2e8))
    for number, lr in enumerate(order):
        config, t = ticket(number, lr=lr, d_model=32)
        reports: list = []
        run_request(planner.request(t, width_probe=False), reports.append)
        results = [{PROGRESS_KEY: point, "config": config} for point in reports if point.eval_index is not None]
        assert results, "the trainer reported no validation point"
        stopped[number] = any(stopper(f"trial{number}", result) for result in results)
    late = [n for n, lr in enumerate(order) if lr == 1e-6 and n >= 3]
    assert all(stopped[n] for n in late) and not any(stopped[n] for n, lr in enumerate(order) if lr == 1e-2)
