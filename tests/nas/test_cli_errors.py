"""Bad input: a one-line error naming the field, exit code 2, and nothing written to the store.

The CLI runs in-process through typer's `CliRunner` (the app carries the one-line rule for usage
errors too); one case runs the installed `nas` console script end to end.
"""

import os
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner, Result

from nas.cli import app
from nas.search.settings import SAMPLERS, SearchSettings
from nas.space.messages import options_message
from nas.store import Store

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "data" / "tiny_space.yaml"
RUNNER = CliRunner()


@pytest.fixture
def nas(tmp_path, monkeypatch):
    """`nas(*args, **env)` runs the CLI in-process in tmp_path, with `env` added to the environment."""
    monkeypatch.chdir(tmp_path)
    saved = dict(os.environ)

    def run(*args: str, **env: str) -> Result:
        return RUNNER.invoke(app, list(args), env=env, catch_exceptions=False)

    yield run
    for key in set(os.environ) - set(saved):  # joining Ray sets its defaults (nas.search.ray_env)
        del os.environ[key]
    os.environ.update(saved)


def space_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return str(path)


def one_error_line(done: Result) -> str:
    """The single `error: ` line on stderr (fails the test otherwise)."""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


SPACE_HEAD = "family: residual_lm\nfixed: {vocab_size: 256, seq_len: 32, batch_size: 4}\nparams:\n"
CASES = {
    "negative budget": (["--trial-flops", "-1"], "--trial-flops"),
    "zero budget": (["--trial-flops", "0"], "--trial-flops"),
    "budget too small for any config": (["--trial-flops", "1e3"], "--trial-flops"),
    "unknown residual": (["--space", SPACE_HEAD + "  residual: {categorical: [cascaded, highway]}\n"], "residual"),
    "tau <= 0": (["--space", SPACE_HEAD + "  ancre_tau: {float: {low: 0.0, high: 0.1}}\n"], "ancre_tau"),
    "mod_rate >= 1": (["--space", SPACE_HEAD + "  mod_rate: {categorical: [0.0, 1.0]}\n"], "mod_rate"),
    "width not divisible by heads": (
        [
            "--space",
            "family: residual_lm\nfixed: {d_model: 100, n_heads: 3}\nparams:\n  n_layers: {int: {low: 1, high: 2}}\n",
        ],
        "n_heads",
    ),
    "malformed YAML": (["--space", SPACE_HEAD + "  n_layers: {int: {low: 1, high: 2}\n   bad: [\n"], "YAML"),
    "missing data file": (["--data", "/nonexistent/corpus.txt"], "--data"),
    "unreachable storage URL": (["--storage", "sqlite:////nonexistent-dir/x.db"], "nonexistent-dir"),
    "unknown sampler": (["--sampler", "hyperband"], "--sampler"),
    "unknown objective": (["--objectives", "loss,flops,latency"], "--objectives: must be loss,flops or loss,flops,kv"),
    "objectives without flops": (["--objectives", "loss,kv"], "--objectives"),
    "empty name": (["--name", " "], "--name"),
    "negative seed": (["--seed", "-1"], "--seed"),
    "seed beyond 32 bits": (["--seed", str(2**32)], "--seed"),
    "no workers": (["--workers", "0"], "--workers"),
    "negative retries": (["--retries", "-1"], "--retries"),
    "malformed Ray address": (["--ray-address", "not an address"], "--ray-address"),
    "budget not a number": (["--trial-flops", "abc"], "--trial-flops"),  # a click usage error, one line too
    "no rungs": (["--rungs", "0"], "--rungs"),
    "target below the top rung": (["--target-flops", "3e10"], "--target-flops"),
    "negative repeat seeds": (["--repeat-seeds", "-1"], "--repeat-seeds"),
    "unknown schedule": (["--schedule", "linear"], "--schedule"),
    "cooldown beyond half the run": (["--cooldown", "0.9"], "--cooldown"),
    "cosine on a budget ladder": (["--schedule", "cosine", "--ladder", "budget"], "--schedule"),
    "searched schedule": (["--space", SPACE_HEAD + "  schedule: {categorical: [wsd, cosine]}\n"], "schedule"),
    "negative tokens per parameter": (["--min-tokens-per-param", "-1"], "--min-tokens-per-param"),
    "tokens per parameter range inverted": (
        ["--min-tokens-per-param", "10", "--max-tokens-per-param", "5"],
        "--max-tokens-per-param",
    ),
    "no config plausible at the target": (["--min-tokens-per-param", "1e9"], "--min-tokens-per-param"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_search_input_is_one_line_exit_2_and_writes_nothing(case, tmp_path, nas):
    args, field = CASES[case]
    args = list(args)
    if args[0] == "--space":
        args[1] = space_file(tmp_path, args[1])
    base = {"--name": "bad", "--trial-flops": "2e10", "--space": str(TINY), "--storage": f"sqlite:///{tmp_path}/r.db"}
    base.update(dict(zip(args[::2], args[1::2], strict=False)))
    done = nas("search", *[x for kv in base.items() for x in kv], "--no-progress")
    assert done.exit_code == 2, done.stderr
    assert field in one_error_line(done), done.stderr
    db = tmp_path / "r.db"
    assert not db.exists() or Store(f"sqlite:///{db}").list_searches() == []


@pytest.mark.parametrize("command", [["resume", "nosuch"], ["show", "nosuch", "--pareto"], ["status", "nosuch"]])
def test_unknown_search_name(command, tmp_path, nas):
    Store(f"sqlite:///{tmp_path}/r.db").close()  # each reads or continues a store that exists
    done = nas(*command, "--storage", f"sqlite:///{tmp_path}/r.db")
    assert done.exit_code == 2
    assert done.stderr.count("\n") == 1 and "nosuch" in done.stderr
    assert Store(f"sqlite:///{tmp_path}/r.db").list_searches() == []


@pytest.mark.parametrize("args, field", [(["--out", "taken"], "--out"), ([], "nosuch.yaml")])
def test_bad_pretrain_input_is_one_line_exit_2_and_writes_nothing(args, field, tmp_path, nas):
    (tmp_path / "taken").write_text("a file, not a run folder")
    done = nas("pretrain", "nosuch.yaml", *args, "--tokens", "1000")
    assert done.exit_code == 2, done.stderr
    assert field in one_error_line(done), done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # no run folder


@pytest.mark.parametrize(
    "option, value",
    [("--gpus-per-trial", "-0.5"), ("--gpus-per-trial", "nan"), ("--gpus-per-trial", "inf"), ("--ray-dir", "a-file")],
)
def test_bad_cluster_options_are_one_line_exit_2_and_write_nothing(option, value, tmp_path, nas):
    (tmp_path / "a-file").write_text("not a folder")
    db = tmp_path / "r.db"
    done = nas(
        "search",
        "--name",
        "bad",
        "--trial-flops",
        "2e10",
        "--space",
        str(TINY),
        option,
        value,
        "--no-progress",
        RESNAS_STORAGE=f"sqlite:///{db}",
    )
    assert done.exit_code == 2, done.stderr
    assert one_error_line(done).startswith(f"error: {option}: must be"), done.stderr
    assert not db.exists() or Store(f"sqlite:///{db}").list_searches() == []


def test_the_store_url_comes_from_resnas_storage_unless_storage_is_given(tmp_path, nas):
    unreachable = "sqlite:////nonexistent-dir/x.db"
    done = nas("list", RESNAS_STORAGE=unreachable)
    assert done.exit_code == 2 and "nonexistent-dir" in done.stderr, done.stderr
    assert not (tmp_path / "resnas.db").exists()  # not the default file
    Store(f"sqlite:///{tmp_path / 'given.db'}").close()
    done = nas("list", "--storage", f"sqlite:///{tmp_path / 'given.db'}", RESNAS_STORAGE=unreachable)
    assert done.exit_code == 0, done.stderr


def test_search_settings_are_validated_wherever_they_are_built():
    settings = SearchSettings(workers=3, sampler="nsga2", gpus_per_trial=0.25)
    assert SearchSettings(**asdict(settings)) == settings  # the stored dict rebuilds the same settings
    with pytest.raises(ValidationError) as info:
        SearchSettings(workers=0, sampler="hyperband", seed=-1, repeat_seeds=9)
    assert options_message(info.value) == (
        "--workers: must be >= 1 (got 0); "
        "--sampler: Input should be 'tpe', 'nsga2', 'random' or 'gp' (got 'hyperband'); "
        "--seed: must be >= 0 (got -1); --repeat-seeds: must be <= 8 (got 9)"
    )
    with pytest.raises(ValidationError):
        replace(settings, retries=-1)  # a changed copy is validated again
    with pytest.raises(ValidationError) as info:
        SearchSettings(**{**asdict(settings), "bogus": 1})
    assert options_message(info.value) == "--bogus: unknown key"


def test_every_sampler_the_settings_accept_can_be_built():
    from nas.search.study import make_sampler

    for name in SAMPLERS:
        make_sampler(name, seed=0)
    with pytest.raises(ValueError, match="--sampler: unknown sampler 'hyperband'"):
        make_sampler("hyperband", seed=0)


def test_the_console_script_rejects_bad_input_in_one_line_and_leaves_the_store_untouched(tmp_path):
    """The installed `nas` script, as a user runs it: a bad option exits 2 with one line, before the store opens."""
    script = Path(sys.executable).with_name("nas")
    assert script.exists(), f"the console script is not installed beside {sys.executable}"
    db = tmp_path / "r.db"
    Store(f"sqlite:///{db}").create_search(
        "kept", requested_trials=1, budget={}, space={}, settings={}, optuna_study_name=None, code_version=None
    )
    before = db.read_bytes()
    done = subprocess.run(
        [str(script), "search", "--name", "bad", "--trial-flops", "2e10", "--space", str(TINY)]
        + ["--workers", "0", "--storage", f"sqlite:///{db}", "--no-progress"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == ["error: --workers: must be >= 1 (got 0)"], done.stderr
    assert db.read_bytes() == before
    assert [s.name for s in Store(f"sqlite:///{db}").list_searches()] == ["kept"]
