"""Bad input: a one-line error naming the field, exit code 2, and nothing written to the store."""

import subprocess
import sys
from pathlib import Path

import pytest

from nas.store import Store

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "data" / "tiny_space.yaml"


def nas(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nas.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def space_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return str(path)


SPACE_HEAD = "family: residual_lm\nfixed: {vocab_size: 256, seq_len: 32, batch_size: 4}\nparams:\n"
CASES = {
    "negative budget": (["--trial-flops", "-1"], "--trial-flops"),
    "zero budget": (["--trial-flops", "0"], "--trial-flops"),
    "budget too small for any config": (["--trial-flops", "1e3"], "--trial-flops"),
    "unknown residual": (["--space", SPACE_HEAD + "  residual: {categorical: [cascaded, highway]}\n"], "residual"),
    "tau <= 0": (["--space", SPACE_HEAD + "  ancre_tau: {float: {low: 0.0, high: 0.1}}\n"], "ancre_tau"),
    "mod_rate >= 1": (["--space", SPACE_HEAD + "  mod_rate: {categorical: [0.0, 1.0]}\n"], "mod_rate"),
    "width not divisible by heads": (["--space", "family: residual_lm\nfixed: {d_model: 100, n_heads: 3}\n"
                                      "params:\n  n_layers: {int: {low: 1, high: 2}}\n"], "n_heads"),
    "malformed YAML": (["--space", SPACE_HEAD + "  n_layers: {int: {low: 1, high: 2}\n   bad: [\n"], "YAML"),
    "missing data file": (["--data", "/nonexistent/corpus.txt"], "--data"),
    "unreachable storage URL": (["--storage", "sqlite:////nonexistent-dir/x.db"], "nonexistent-dir"),
    "unknown sampler": (["--sampler", "hyperband"], "--sampler"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_search_input_is_one_line_exit_2_and_writes_nothing(case, tmp_path):
    args, field = CASES[case]
    args = list(args)
    if args[0] == "--space":
        args[1] = space_file(tmp_path, args[1])
    base = {"--trial-flops": "2e10", "--space": str(TINY), "--storage": f"sqlite:///{tmp_path}/r.db"}
    base.update(dict(zip(args[::2], args[1::2])))
    done = nas("search", "--name", "bad", *[x for kv in base.items() for x in kv], "--no-progress", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and field in lines[0], done.stderr
    db = tmp_path / "r.db"
    assert not db.exists() or Store(f"sqlite:///{db}").list_searches() == []


@pytest.mark.parametrize("command", [["resume", "nosuch"], ["show", "nosuch", "--pareto"], ["status", "nosuch"]])
def test_unknown_search_name(command, tmp_path):
    done = nas(*command, "--storage", f"sqlite:///{tmp_path}/r.db", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "nosuch" in done.stderr
    assert Store(f"sqlite:///{tmp_path}/r.db").list_searches() == []
