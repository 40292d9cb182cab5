"""`nas show`'s front table: 120 columns by default, every column with --wide, and "uncalibrated" bands when a
search has too few held-out rungs."""

import io

from rich.console import Console

from helpers import measured_rung
from nas.cli.front_table import COMPACT_COLUMNS, WIDE_COLUMNS, front_report
from nas.search_answer import JSON_KEYS, TRIAL_KEYS, search_answer
from nas.space.budget import Budget
from nas.store import Store, default_url
from workers.trial.contract import CountedCosts
from workers.trial.result import TrialResult

BUDGET = Budget(trial_flops=1e10, min_tokens_per_param=None, layout="as_given")  # the two rungs `seeded` stores


def seeded(tmp_path, trials: int) -> Store:
    store = Store(default_url(tmp_path))
    store.create_search("s", requested_trials=trials, budget=BUDGET.model_dump(), space={}, settings={},
                        optuna_study_name=None, code_version=None)  # fmt: skip
    for n in range(trials):
        config = {"residual": "nag", "n_layers": 2 + n, "d_model": 64, "n_heads": 2, "mod_rate": 0.25, "lr": 3e-3}
        tid = store.start_trial("s", number=n, config=config, costs=CountedCosts(1e5 / (1 + n)))
        for r in range(2):
            loss = 2.0 + 0.05 * n - 0.2 * r + 0.01 * (n % 2) * r
            store.record_rung("s", n, measured_rung(r, loss, 1e10 * 2**r))
        store.finish_trial(tid, TrialResult.loss_only(1.8 + 0.05 * n, 1e5 / (1 + n)))
    return store


def render(table, lines, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, record=True)
    console.print(table)
    for line in lines:
        console.print(line)
    return console.export_text()


def test_the_compact_table_reads_in_120_columns_and_wide_has_every_column(tmp_path):
    with seeded(tmp_path, 6) as store:
        found = search_answer(store, "s")
    table, lines = front_report(found)
    text = render(table, lines, 120)
    assert max(len(line) for line in text.splitlines()) <= 120 and "…" not in text
    assert all(column in text for column in ("trial", "arch", "80% band", "tied with", "FLOPs/tok"))
    assert "80% bands calibrated on 6 held-out rungs" in text and "uncalibrated" not in text
    wide, _ = front_report(found, wide=True)
    assert [c.header for c in wide.columns] == list(WIDE_COLUMNS) and len(COMPACT_COLUMNS) < len(WIDE_COLUMNS)
    assert "top rung: rung 1 on the curve" in render(wide, [], 260)


def test_a_search_with_too_few_held_out_rungs_says_its_bands_are_uncalibrated(tmp_path):
    with seeded(tmp_path, 3) as store:
        table, lines = front_report(search_answer(store, "s"), only_front=False)
    text = render(table, lines, 120)
    assert text.count("uncalibrated") >= 3 + 1  # every row's band, and the line under the table
    assert "bands uncalibrated: 3 trials with a held-out rung, 4 needed" in text


def test_the_answer_is_computed_once_per_write_and_shared_by_show_and_the_dashboard(tmp_path):
    from dashboard import reads

    with seeded(tmp_path, 6) as store:
        first = search_answer(store, "s")
        assert search_answer(store, "s") is first  # nothing written since: the same answer, not a refit
        at_t = search_answer(store, "s", BUDGET.ladder.target_flops)
        assert (
            reads.search_answer(store.url, "s", BUDGET.ladder.target_flops) is at_t
        )  # the dashboard reads the same one
        table, lines = front_report(first)
        assert lines[-len(first.rests_on) :] == list(first.rests_on)  # nas show prints the shared answer's basis
        store.record_rung("s", 0, measured_rung(2, 1.5, 4e10))  # a write: the next read answers anew
        second = search_answer(store, "s")
        assert second is not first and second.predictions[0].rungs == 3 and first.predictions[0].rungs == 2
        assert search_answer(store, "s", target=2 * BUDGET.ladder.target_flops).target == 2 * BUDGET.ladder.target_flops


def test_show_json_holds_the_numbers_the_table_prints(tmp_path):
    """`nas show --json` is the same answer as the table: the front in its order, each loss at T and band."""
    with seeded(tmp_path, 6) as store:
        found = search_answer(store, "s")
    table, _ = front_report(found)
    cells = {c.header: list(c._cells) for c in table.columns}
    data = found.as_dict()
    assert set(data) == set(JSON_KEYS) and all(set(t) == set(TRIAL_KEYS) for t in data["trials"])
    assert data["front"] == [int(n) for n in cells["trial"]]
    trials = {t["number"]: t for t in data["trials"]}
    for number, loss, band in zip(cells["trial"], cells["loss at T"], cells["80% band"], strict=True):
        t = trials[int(number)]
        assert f"{t['loss_at_target']:.4f}" == loss and f"{t['band'][0]:.4f}-{t['band'][1]:.4f}" == band
        assert t["corrected_top_rung_loss"] is None and t["sd"] is not None and data["losses_are"] == "loss at T"
        # a budget ladder: its rungs are the configs themselves, so no error model's facts (the bound: test_error_model)
        assert t["rests_on"]["top_rung_steps"] is None and t["rests_on"]["within_measured_steps"] is None
    assert data["hypervolume"]["value"] == found.hypervolume and data["rests_on"] == list(found.rests_on)
    assert data["settings"]["target_flops"] == BUDGET.ladder.target_flops and data["settings"]["layout"]["budgets"] == [
        1e10,
        2e10,
    ]


def test_without_a_curve_to_T_the_table_says_its_column_is_the_corrected_top_rung(tmp_path):
    """One rung per trial and no level rungs: no loss at T is printed; the ranked column is headed for what it
    holds and shows the JSON's `corrected_top_rung_loss`."""
    budget = Budget(trial_flops=1e10, min_tokens_per_param=None, layout="as_given", rungs=1)
    with Store(default_url(tmp_path)) as store:
        store.create_search("one", requested_trials=4, budget=budget.model_dump(), space={}, settings={},
                            optuna_study_name=None, code_version=None)  # fmt: skip
        for n in range(4):
            config = {"residual": "nag", "n_layers": 2 + n, "d_model": 64, "n_heads": 2, "mod_rate": 0.0, "lr": 3e-3}
            tid = store.start_trial("one", number=n, config=config, costs=CountedCosts(1e5 / (1 + n)))
            store.record_rung("one", n, measured_rung(0, 2.0 + 0.03 * n, 1e10))
            store.finish_trial(tid, TrialResult.loss_only(2.0 + 0.03 * n, 1e5 / (1 + n)))
        found = search_answer(store, "one")
    table, lines = front_report(found, only_front=False)
    cells = {c.header: list(c._cells) for c in table.columns}
    assert "loss at T" not in cells and found.as_dict()["losses_are"] == "top rung"
    trials = {t["number"]: t for t in found.as_dict()["trials"]}
    for number, loss in zip(cells["trial"], cells["corrected top rung"], strict=True):
        assert trials[int(number)]["loss_at_target"] is None
        assert f"{trials[int(number)]['corrected_top_rung_loss']:.4f}" == loss
    assert any(line.startswith("no loss at T: the table ranks by each top rung's loss as measured") for line in lines)
    assert found.answer is not None and found.answer.discrepancy is None  # a budget ladder: its rungs are the configs
