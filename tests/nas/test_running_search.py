"""What a search stores and decides while its trials run, watched on a real `nas search` (Optuna's define-by-run
config, Ray Tune, the trainable, the store): a running trial's row carries its counted FLOPs from the moment it
starts (rung promotion compares running peers on them), and `--early-stop` stops a trial that loses to the trials
of its FLOP band.

The search: one architecture (so every trial is in one FLOP band), the learning rate its only knob, 1e-2 or 1e-6;
a random sampler whose seed proposes 1e-2 three times, then 1e-6 (a trial that learns nothing), then 1e-2; one rung,
four validations per run, one trial at a time."""

from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest
import yaml

from nas.store import Store

SPACE = {
    "family": "residual_lm",
    "fixed": {
        "vocab_size": 256,
        "seq_len": 32,
        "batch_size": 4,
        "n_layers": 2,
        "d_model": 32,
        "n_heads": 2,
        "mlp_ratio": 2.0,
        "residual": "cascaded",
        "eval_sequences": 8,
        "evals": 4,
    },
    "params": {"lr": {"categorical": [1.0e-2, 1.0e-6]}},
}
GOOD, BAD = 1.0e-2, 1.0e-6
SAMPLER_SEED = 2  # RandomSampler(2) proposes GOOD, GOOD, GOOD, BAD, GOOD


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    """(the trial rows when the search is done, each trial's executed FLOPs per token as read while it ran)."""
    tmp = tmp_path_factory.mktemp("running")
    space = tmp / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    url = f"sqlite:///{tmp / 'r.db'}"
    args = [sys.executable, "-m", "nas.cli", "search", "--name", "watched", "--trial-flops", "2e9", "--trials", "5",
            "--workers", "1", "--space", str(space), "--storage", url, "--rungs", "1", "--sampler", "random",
            "--seed", str(SAMPLER_SEED), "--early-stop", "--min-tokens-per-param", "0", "--repeat-seeds", "0",
            "--no-progress"]  # fmt: skip
    seen: dict[int, list] = {}
    with Store(url) as store:  # a reader beside the search's driver, as the dashboard is
        search = subprocess.Popen(args, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 600
        while search.poll() is None and time.monotonic() < deadline:
            if any(s.name == "watched" for s in store.list_searches()):
                for row in store.trials("watched", statuses=["running"]):
                    seen.setdefault(row.number, []).append(row.executed_flops_per_token)
            time.sleep(0.1)
        search.kill()
        out, err = search.communicate()
        assert search.returncode == 0, out[-2000:] + err[-4000:]
        return store.trials("watched"), seen


@pytest.mark.slow
def test_a_running_trial_carries_its_counted_flops_from_its_start(watched):
    rows, seen = watched
    assert seen, "no trial was seen running"
    final = {r.number: r.executed_flops_per_token for r in rows}
    assert all(f is not None and math.isfinite(f) and f > 0 for f in final.values()), final  # set, and kept
    for number, observed in seen.items():
        assert observed == [final[number]] * len(observed), (number, observed)  # never NULL while it ran


@pytest.mark.slow
def test_early_stop_stops_the_trial_that_loses_to_its_flop_band(watched):
    rows, _ = watched
    by_lr = {lr: [r for r in rows if r.config["lr"] == lr] for lr in (GOOD, BAD)}
    assert [r.number for r in rows] == [0, 1, 2, 3, 4] and [r.number for r in by_lr[BAD]] == [3]
    stopped = by_lr[BAD][0]
    assert stopped.status == "stopped" and "losing to its FLOP band" in stopped.failure_reason
    assert stopped.tokens_seen > 0  # cut short after its first validation, its tokens so far recorded
    assert {r.status for r in by_lr[GOOD]} == {"completed"}  # equal to the band's median: never stopped
