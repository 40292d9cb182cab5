"""The benchmarks' one table reader and their search replays: typed rows, configs still being built left out of
the grading, a table searched as Optuna's own study loop searches it, and reports replayed on the committed
tables giving the committed figures."""

import csv
import json
import math
from pathlib import Path

import optuna
import pytest

from helpers import ROOT, import_benchmark, run_script

RESULTS, DATA = ROOT / "benchmarks" / "results", ROOT / "benchmarks" / "data"


def _write(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def assert_same_figures(got, want, where: str = "") -> None:
    """Every key and value of `want` in `got`, numbers to 1e-9 (two runs of one report on two machines differ in
    the last digits of a least-squares fit)."""
    if isinstance(want, dict):
        assert set(got) == set(want), where
        for k in want:
            assert_same_figures(got[k], want[k], f"{where}/{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same_figures(g, w, f"{where}/{i}")
    elif isinstance(want, float) and not isinstance(got, bool):
        assert got == pytest.approx(want, rel=1e-9, nan_ok=True), where
    else:
        assert got == want, where


def test_a_table_reads_typed_and_an_empty_cell_as_none(tmp_path):
    from benchmarks.harness import read_table

    path = _write(
        tmp_path / "t.csv",
        [
            dict(config=3, residual="nag", d_model=64, lr=2e-3, val_loss="inf", on_path=True, nag_gate_lr="", note=""),
            dict(config=4, residual="ancre", d_model=32, lr=1e-3, val_loss=1.5, on_path=False, nag_gate_lr=1, note="x"),
        ],
    )
    first, second = read_table(path)
    assert first == dict(
        config=3, residual="nag", d_model=64, lr=2e-3, val_loss=math.inf, on_path=True, nag_gate_lr=None, note=""
    )
    assert type(second["d_model"]) is int and type(second["nag_gate_lr"]) is float and second["on_path"] is False


def test_a_config_whose_rows_are_not_all_there_is_left_out_of_every_table():
    """Config 2 has its ladder rows and no truth yet; config 3 one seed of its replica rows: both are left out of
    both tables, and the configs every table holds in full stay, all their rows."""
    from benchmarks.trust.grading import graded_rows

    def rows(config: int, kinds: dict[str, list[float]], seeds=(0, 1)) -> list[dict]:
        return [
            dict(config=config, kind=kind, seed=seed, budget_flops=budget)
            for kind, budgets in kinds.items()
            for seed in seeds
            for budget in budgets
        ]

    ladder_and_truth = {"ladder": [1e9, 2e9], "truth": [2e10]}
    runs = rows(0, ladder_and_truth) + rows(1, ladder_and_truth) + rows(2, {"ladder": [1e9, 2e9]})
    replica = (
        rows(0, {"replica": [2e8, 6e8]}) + rows(1, {"replica": [2e8, 6e8]}) + rows(3, {"replica": [2e8, 6e8]}, (0,))
    )
    graded_runs, graded_replica = graded_rows(runs, replica)
    assert graded_runs == [r for r in runs if r["config"] in (0, 1)]
    assert graded_replica == [r for r in replica if r["config"] in (0, 1)]


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_a_table_is_searched_as_a_study_of_the_search_samples_it(sampler):
    """`sample_table` (ask and tell) proposes, trial by trial, what `study.optimize` with the same sampler does."""
    from benchmarks.trust.replay import sample_table
    from nas.answer.pareto import FrontPoint
    from nas.search.study import make_sampler

    space = {"residual": ["cascaded", "nag", "ancre"], "n_layers": [2, 4], "lr": [1e-3, 4e-3]}
    table = {
        (f, n, lr): FrontPoint(number=i, val_loss=2.0 + 0.1 * n * lr * 1e3 - 0.05 * i, executed_flops_per_token=n * 1e4)
        for i, (f, n, lr) in enumerate(
            (f, n, lr) for f in space["residual"] for n in space["n_layers"] for lr in space["lr"]
        )
    }
    replayed = sample_table(space, lambda knobs: table[tuple(knobs.values())], sampler, seed=3, trials=25)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study, picked = optuna.create_study(directions=["minimize", "minimize"], sampler=make_sampler(sampler, 3)), []

    def objective(trial):
        picked.append(table[tuple(trial.suggest_categorical(k, v) for k, v in space.items())])
        return picked[-1].val_loss, picked[-1].executed_flops_per_token

    study.optimize(objective, n_trials=25)
    assert [p.number for p in replayed] == [p.number for p in picked]


def test_the_transfer_report_gives_the_committed_figures_from_the_committed_tables(tmp_path):
    transfer = import_benchmark("transfer")
    result = json.loads(json.dumps(transfer.report(DATA / "transfer_runs.csv", tmp_path / "transfer.json")))
    committed = json.loads((RESULTS / "transfer.json").read_text())
    for key in ("rows", "summary", "goals", "horizon_check", "horizon_rule_rows"):
        assert_same_figures(result[key], committed[key], key)


@pytest.mark.slow  # 20 searches of 30 trials
def test_the_search_efficiency_replay_gives_the_committed_figures(tmp_path):
    out = tmp_path / "search_efficiency.json"
    run_script("-m", "benchmarks.trust.search_efficiency", "replay", "--out", str(out))
    result, committed = (json.loads(p.read_text()) for p in (out, RESULTS / "search_efficiency.json"))
    for key in ("grid", "summary", "per_seed_curves", "reference_point"):
        assert_same_figures(result[key], committed[key], key)


@pytest.mark.slow  # some hundred searches replayed through the rung gate
def test_the_fidelity_report_gives_the_committed_figures_on_the_code_corpus():
    fidelity, constants = import_benchmark("fidelity"), import_benchmark("forecast_constants")
    corpus = import_benchmark("fidelity_tables").CORPORA["code"]
    model = constants.held_out_models()["code"]  # fitted on the other corpora, as reported
    graded = json.loads(json.dumps(fidelity.corpus_report(corpus, corpus.runs, corpus.replica_runs, model)))
    committed = json.loads((RESULTS / "fidelity.json").read_text())
    assert_same_figures(graded, committed["corpora"]["code"], "code")
    assert_same_figures(fidelity.headline(graded), committed["summary"]["headline"]["code"], "headline")
