"""`nas search --candidates FILE`: the user's own configs, ranked for T by an otherwise unchanged search (Optuna's
enqueue, Ray Tune, the rung gate, the answer), and every bad file refused in one line before anything is written."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from typer.testing import CliRunner

from nas.cli import app
from nas.search.study import optuna_storage
from nas.space import CANDIDATE, load_space, to_configs
from nas.space.candidates import load_candidates, outside_the_space, with_candidates
from nas.store import Store
from search_spaces.residual_lm import ArchConfig
from searches import DATA, nas_args

TINY = DATA / "tiny_space.yaml"
SIX = [  # every family, two depths, MoD, learning rates: what a user brings (n_heads left out on two)
    {"residual": "cascaded", "n_layers": 2, "d_model": 32, "n_heads": 2},
    {"residual": "nag", "n_layers": 2, "d_model": 32, "n_heads": 2},
    {"residual": "ancre", "n_layers": 2, "d_model": 32, "n_heads": 2, "lr": 5.0e-3},
    {"residual": "cascaded", "n_layers": 1, "d_model": 64, "n_heads": 2, "mod_rate": 0.0},
    {"residual": "nag", "n_layers": 2, "d_model": 32, "mod_rate": 0.25},
    {"residual": "cascaded", "n_layers": 2, "d_model": 48},
]
BAD = {  # file text -> what the one line must say
    "unknown knob": ("candidates:\n  - {residual: nag, n_layerz: 2}\n", r"candidates\[0\]\.n_layerz: not a knob"),
    "no candidates key": ("configs:\n  - {residual: nag}\n", r"must be a mapping with the key candidates"),
    "duplicate": ("candidates:\n  - {residual: nag, n_layers: 2}\n  - {n_layers: 2, residual: nag}\n",
                  r"candidates\[1\]: the same config as candidates\[0\]"),
    "invalid shape": ("candidates:\n  - {d_model: 100, n_heads: 3}\n", r"candidates\[0\]\.d_model: .*divisible"),
    "negative width": ("candidates:\n  - {d_model: -64}\n", r"candidates\[0\]\.d_model: must be >= 2"),
    "a string for a number": ("candidates:\n  - {n_layers: four}\n", r"candidates\[0\]\.n_layers: must be a whole"),
    "empty list": ("candidates: []\n", r"candidates: must list at least one config"),
    "YAML syntax": ("candidates:\n  - {residual: nag\n", r"\.yaml:3:1: invalid YAML"),
    "no file": (None, r"no such file"),
    "another family's knob": ("candidates:\n  - {residual: nag, n_experts: 8}\n",
                              r"candidates\[0\]\.n_experts: not a knob of residual_lm"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD)
def test_a_bad_candidates_file_is_refused_in_one_line_before_anything_is_written(tmp_path, case):
    text, says = BAD[case]
    file = tmp_path / "candidates.yaml"
    if text is not None:
        file.write_text(text)
    db = tmp_path / "r.db"
    args = ["search", "--name", "c", "--trial-flops", "2e9", "--space", str(TINY), "--candidates", str(file),
            "--storage", f"sqlite:///{db}"]  # fmt: skip
    done = CliRunner().invoke(app, args)
    lines = done.output.strip().splitlines()
    assert done.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: --candidates "), done.output
    assert re.search(says, lines[0]), lines[0]
    assert not db.exists()  # nothing stored


def test_a_candidate_leaves_its_knobs_to_the_configs_defaults_and_shares_the_searchs_fields(tmp_path):
    file = tmp_path / "c.yaml"
    file.write_text(yaml.safe_dump({"candidates": SIX}))
    space = load_space(TINY)  # fixes n_heads 2 and mlp_ratio 2.0: the search's shared fields are the rest
    found = with_candidates(space, load_candidates(file, space))
    arch, optim, run = to_configs(found, {CANDIDATE: 5})
    assert (arch.n_heads, arch.mlp_ratio) == (ArchConfig().n_heads, ArchConfig().mlp_ratio)  # defaults, not fixed
    assert (arch.seq_len, run.batch_size, run.evals) == (32, 4, 1)  # the search's shared fields
    assert to_configs(found, {CANDIDATE: 2})[1].lr == 5.0e-3 and found.sampled == (CANDIDATE,)
    wide = {"residual": "nag", "n_layers": 9, "d_model": 32, "n_heads": 2}
    assert outside_the_space([SIX[0], wide], space) == ["candidates[1]: n_layers 9 outside 1..2: trained as asked"]


def test_a_candidates_search_refuses_another_number_of_trials(tmp_path):
    file = tmp_path / "c.yaml"
    file.write_text(yaml.safe_dump({"candidates": SIX}))
    args = ["search", "--name", "c", "--trial-flops", "2e9", "--space", str(TINY), "--candidates", str(file),
            "--trials", "4", "--storage", f"sqlite:///{tmp_path / 'r.db'}"]  # fmt: skip
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 2 and "--trials 4: a candidates search trains each of its 6 candidates once" in done.output


@pytest.mark.slow
def test_a_search_of_six_candidates_trains_exactly_those_and_its_json_ranks_them_as_show_does(tmp_path):
    file = tmp_path / "c.yaml"
    file.write_text(yaml.safe_dump({"candidates": SIX}))
    url = f"sqlite:///{tmp_path / 'r.db'}"
    args = [*nas_args("six", url, trials=len(SIX), rungs=2, eta=2, repeat_seeds=0), "--candidates", str(file)]
    done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    with Store(url) as store:
        rows = store.trials("six")
        study = optuna.load_study(study_name=store.get_search("six").optuna_study_name, storage=optuna_storage(url))
    assert sorted(r.config[CANDIDATE] for r in rows) == list(range(6)) and len(rows) == 6  # each once, none else
    assert sorted(t.params[CANDIDATE] for t in study.trials) == list(range(6))  # Optuna was handed each, enqueued
    for r in rows:  # what each trial trained is its candidate, its knobs left out at their defaults
        knobs = SIX[r.config[CANDIDATE]]
        assert {k: r.config["arch"].get(k, r.config["optim"].get(k)) for k in knobs} == knobs
        assert r.config["arch"]["n_heads"] == knobs.get("n_heads", ArchConfig().n_heads)
    show = [sys.executable, "-m", "nas.cli", "show", "six", "--storage", url]
    shown = json.loads(subprocess.run([*show, "--json"], cwd=tmp_path, capture_output=True, text=True).stdout)
    every, front = (subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, check=True).stdout
                    for cmd in (show, [*show, "--pareto"]))  # fmt: skip
    assert shown["front"] == _trial_numbers(front) and len(shown["trials"]) == 6  # the same front, in its order
    stated = "loss_at_target" if shown["losses_are"] == "loss at T" else "corrected_top_rung_loss"
    predicted = {t["number"]: t[stated] for t in shown["trials"]}
    assert _trial_numbers(every) == list(range(6))
    for line in every.splitlines():  # each trial's loss at T as the table prints it
        if number := re.match(r"│\s*(\d+)\s*│", line):
            assert f"{predicted[int(number.group(1))]:.4f}" in line, line


def _trial_numbers(table: str) -> list[int]:
    """The trial numbers of `nas show`'s table, top to bottom."""
    return [int(m.group(1)) for line in table.splitlines() if (m := re.match(r"│\s*(\d+)\s*│", line))]


def _dry(tmp_path: Path, *extra: str):
    db = tmp_path / "r.db"
    args = ["search", "--name", "d", "--trial-flops", "2e9", "--space", str(TINY), "--min-tokens-per-param", "0",
            "--storage", f"sqlite:///{db}", "--dry-run", *extra]  # fmt: skip
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    assert not db.exists()  # nothing stored
    return done.output


@pytest.mark.slow
def test_a_dry_run_prints_the_plan_and_writes_nothing(tmp_path):
    def harmonic(n: int) -> float:  # the expected front of n random points on two objectives
        return sum(1 / k for k in range(1, n + 1))

    text = _dry(tmp_path, "--trials", "8", "--rungs", "2", "--eta", "2")  # the ladder as asked
    assert "replica ladder" in text and "8 trials" in text and "dry run: nothing trained, nothing stored" in text
    flops = float(re.search(r"([0-9.e+]+) training FLOPs in all", text).group(1))
    climbing = sum(-(-k // 2) / k for k in range(1, 9))  # the k-th of 8 climbs if among the best ceil(k / 2) so far
    assert climbing == pytest.approx(4.84, abs=0.01)
    # rungs, the noise's repeats, the front's (of the 5 expected at the top, H_5 on two objectives)
    expected = 8 * 2e9 + climbing * 4e9 + 2 * 2e9 + harmonic(5) * (2e9 + 4e9)
    assert flops == pytest.approx(expected, rel=0.01)
    by_cost = _dry(tmp_path, "--trials", "8")  # a replica ladder that saves nothing: every config once at the top
    assert "layout: every config once at the top rung" in by_cost
    flops = float(re.search(r"([0-9.e+]+) training FLOPs in all", by_cost).group(1))
    assert flops == pytest.approx(8 * 4e9 + harmonic(8) * 4e9, rel=0.01)
    file = tmp_path / "c.yaml"
    file.write_text(yaml.safe_dump({"candidates": SIX}))
    each = _dry(tmp_path, "--candidates", str(file))
    assert "each candidate" in each and "6 trials" in each


def test_resume_hands_optuna_only_the_candidates_without_a_final_trial_and_never_one_twice(tmp_path):
    from nas.search.launch import candidates_left
    from nas.search.study import enqueue_candidates
    from workers.status import TrialStatus
    from workers.trial.result import TrialResult

    file = tmp_path / "c.yaml"
    file.write_text(yaml.safe_dump({"candidates": SIX}))
    space = with_candidates(load_space(TINY), load_candidates(file, load_space(TINY)))
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with Store(url) as store:
        store.create_search("c", requested_trials=6, budget={}, space=space.spec(), settings={},
                            optuna_study_name="c-study", code_version=None)  # fmt: skip
        for number, (index, status) in enumerate([(0, "completed"), (1, "interrupted"), (2, "infeasible")]):
            row = store.start_trial("c", number=number, config={CANDIDATE: index, **SIX[index]})
            store.finish_trial(row, TrialResult.untrained(TrialStatus(status), None, 1e6, 0.0))
        assert candidates_left(store, "c", space) == [1, 3, 4, 5]  # interrupted: again; infeasible: stays so
    storage = optuna_storage(url)
    optuna.create_study(study_name="c-study", storage=storage, directions=["minimize", "minimize"])
    assert enqueue_candidates(storage, "c-study", [1, 3]) == 2
    assert enqueue_candidates(storage, "c-study", [1, 3, 4]) == 1  # 1 and 3 are waiting already
    waiting = optuna.load_study(study_name="c-study", storage=storage).get_trials(
        states=(optuna.trial.TrialState.WAITING,)
    )
    assert [t.user_attrs[CANDIDATE] for t in waiting] == [1, 3, 4]
