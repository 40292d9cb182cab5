"""`nas show`'s front table: 120 columns by default, every column with --wide, and "uncalibrated" bands when a
search has too few held-out rungs."""

import io

from rich.console import Console

from nas.answer.target import answer_at_target
from nas.cli.front_table import COMPACT_COLUMNS, WIDE_COLUMNS, front_report
from nas.space.budget import Budget
from nas.store import Store, default_url


def seeded(tmp_path, trials: int) -> Store:
    store = Store(default_url(tmp_path))
    store.create_search("s", requested_trials=trials, budget={}, space={}, settings={}, optuna_study_name=None,
                        code_version=None)  # fmt: skip
    for n in range(trials):
        config = {"residual": "nag", "n_layers": 2 + n, "d_model": 64, "n_heads": 2, "mod_rate": 0.25, "lr": 3e-3}
        tid = store.start_trial("s", number=n, config=config)
        for r in range(2):
            loss = 2.0 + 0.05 * n - 0.2 * r + 0.01 * (n % 2) * r
            store.record_rung("s", n, 0, {"rung": r, "budget_flops": 1e10 * 2**r, "steps": 1, "tokens": 1,
                                          "val_loss": loss, "training_flops": 1e10 * 2**r})  # fmt: skip
        store.finish_trial(tid, {"status": "completed", "val_loss": 1.8 + 0.05 * n,
                                 "executed_flops_per_token": 1e5 / (1 + n)})  # fmt: skip
    return store


def render(table, lines, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, record=True)
    console.print(table)
    for line in lines:
        console.print(line)
    return console.export_text()


def test_the_compact_table_reads_in_120_columns_and_wide_has_every_column(tmp_path):
    with seeded(tmp_path, 6) as store:
        rows, rungs = store.trials("s"), store.rungs("s")
    budget = Budget(trial_flops=1e10, min_tokens_per_param=None)
    answer = answer_at_target(rungs, budget.target)
    table, lines = front_report("s", rows, rungs, budget, answer)
    text = render(table, lines, 120)
    assert max(len(line) for line in text.splitlines()) <= 120 and "…" not in text
    assert all(column in text for column in ("trial", "arch", "80% band", "tied with", "FLOPs/tok"))
    assert "80% bands calibrated on 6 held-out rungs" in text and "uncalibrated" not in text
    wide, _ = front_report("s", rows, rungs, budget, answer, wide=True)
    assert [c.header for c in wide.columns] == list(WIDE_COLUMNS) and len(COMPACT_COLUMNS) < len(WIDE_COLUMNS)
    assert "top rung: rung 1 on the curve" in render(wide, [], 260)


def test_a_search_with_too_few_held_out_rungs_says_its_bands_are_uncalibrated(tmp_path):
    with seeded(tmp_path, 3) as store:
        rows, rungs = store.trials("s"), store.rungs("s")
    budget = Budget(trial_flops=1e10, min_tokens_per_param=None)
    table, lines = front_report("s", rows, rungs, budget, answer_at_target(rungs, budget.target), only_front=False)
    text = render(table, lines, 120)
    assert text.count("uncalibrated") >= 3 + 1  # every row's band, and the line under the table
    assert "bands uncalibrated: 3 trials with a held-out rung, 4 needed" in text
