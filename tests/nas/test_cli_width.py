"""At 80 columns no name a user must type is cut: every option of every command's `--help`, the searches of
`nas list`, the trial numbers of `nas status NAME`. Other columns wrap or are left out (and said so) first."""

import re
from dataclasses import replace

import pytest
import typer
from typer.testing import CliRunner

from nas.cli import app
from nas.cli.inputs import console
from nas.cli.reports import LIST_COLUMNS
from nas.store import Store, default_url
from workers.status import TrialStatus
from workers.trial.result import TrialResult

RUNNER = CliRunner()
COMMANDS = typer.main.get_command(app).commands
NAMES = ("demo-20261203-121314", "exp1", "a-much-longer-search-name-for-bpe-8k")


def assert_fits(output: str, width: int = 80) -> None:
    assert "…" not in output, output
    assert max(len(line) for line in output.splitlines()) <= width, output


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_option_name_is_whole_in_help_at_80_columns(command):
    args = ["--help"] if command is None else [command, "--help"]
    done = RUNNER.invoke(app, args, env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert done.exit_code == 0, done.output
    assert_fits(done.output)
    group = typer.main.get_command(app)
    names = list(COMMANDS) if command is None else []
    params = group.params if command is None else COMMANDS[command].params
    names += [opt for p in params for opt in (*p.opts, *p.secondary_opts) if opt.startswith("-")]
    for name in names:
        assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", done.output), (name, done.output)


@pytest.fixture
def store_url(tmp_path):
    url = default_url(tmp_path)
    with Store(url) as store:
        for name in NAMES:
            store.create_search(name, requested_trials=12, budget={}, space={}, settings={}, optuna_study_name=None,
                                code_version=None)  # fmt: skip
            for number, (status, reason) in enumerate((("completed", None), ("failed", "RuntimeError: out of memory"))):
                trial = store.start_trial(name, number=number, config={"arch": {"residual": "cascaded"}})
                result = TrialResult.loss_only(2.0 + number, 1e6)
                store.finish_trial(
                    trial, replace(result, status=TrialStatus(status), failure_reason=reason, val_bpb=1.2)
                )
    return url


@pytest.fixture
def columns(monkeypatch):
    """`columns(n)`: `nas` prints as on a terminal n columns wide."""
    return lambda width: monkeypatch.setattr(console, "width", width)


def test_list_keeps_every_search_name_whole_at_80_columns(store_url, columns):
    columns(80)
    done = RUNNER.invoke(app, ["list", "--storage", store_url])
    assert done.exit_code == 0, done.output
    assert_fits(done.output)
    assert all(name in done.output for name in NAMES)
    assert "hidden to fit 80 columns: created" in " ".join(done.output.split())  # said, not silently lost


def test_list_shows_every_column_where_they_fit(store_url, columns):
    columns(200)
    done = RUNNER.invoke(app, ["list", "--storage", store_url])
    assert all(f" {header} " in done.output for header in LIST_COLUMNS) and "hidden" not in done.output


def test_status_keeps_trial_numbers_and_reasons_whole_at_80_columns(store_url, columns):
    columns(80)
    done = RUNNER.invoke(app, ["status", NAMES[-1], "--storage", store_url])
    assert done.exit_code == 0, done.output
    assert_fits(done.output)
    assert re.search(r"│ 1 +│ failed +│", done.output) and "RuntimeError:" in done.output and "memory" in done.output
