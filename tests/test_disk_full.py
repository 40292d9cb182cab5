"""A full disk, for real: a tmpfs mount of a few hundred KB under the checkpoint or the SQLite store.

Mounting needs root (CI and this machine run as root); elsewhere the tests skip, saying why.
A full disk fails the trial or the write at once with "disk full" in one line, the last complete
checkpoint stays loadable, and the store is never corrupt: everything committed before stays, and
writes succeed again once there is room.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import torch
from sqlalchemy import create_engine, text

from nas.store import Store, StoreError
from search_spaces.residual_lm import flavour, flops_per_token
from workers.data.config import DataConfig
from workers.data.corpus import load_corpus
from workers.training.config import RunConfig
from workers.training.records import CurvePoint
from workers.training.train import train
from workers.trial.result import TrialResult
from workers.trial.run import run_trial

RUN = RunConfig(batch_size=4, eval_sequences=8, evals=2, report_every=2)


class SmallDisk:
    """A tmpfs of `size` bytes mounted at `path` (unmounted by the fixture)."""

    def __init__(self, path: Path):
        self.path, self.mounted = path, False

    def mount(self, size: int) -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(self.path)], capture_output=True, text=True
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
        self.mounted = True
        return self.path

    def resize(self, size: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(self.path)], check=True)


@pytest.fixture
def small_disk(tmp_path):
    disk = SmallDisk(tmp_path / "small")
    yield disk
    if disk.mounted:
        subprocess.run(["umount", "-l", str(disk.path)], check=False)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return load_corpus(DataConfig(cache_dir=str(tmp_path_factory.mktemp("cache"))))


def test_a_checkpoint_on_a_full_disk_fails_the_trial_as_disk_full_and_keeps_the_last_one(corpus, tmp_path, small_disk):
    cfg = flavour("debug", vocab_size=256, seq_len=32, residual="nag")
    budget = 3 * flops_per_token(cfg).executed * 4 * 32 * 12
    sizing = tmp_path / "sizing"
    one = RUN.model_copy(update={"checkpoint_dir": str(sizing), "checkpoint_every": 12})
    train(cfg, budget, corpus, run=one)  # writes one checkpoint, to size the disk by
    size = (sizing / "last.pt").stat().st_size
    disk = small_disk.mount(int(1.5 * size))  # room for one checkpoint, not for it and the next one's write

    run = RUN.model_copy(update={"checkpoint_dir": str(disk), "checkpoint_every": 4})
    result = run_trial(cfg, budget, corpus, run=run, width_probe=False)
    assert result.status == "failed"
    assert result.failure_reason.startswith("disk full:") and "\n" not in result.failure_reason
    assert not (disk / "last.tmp").exists()  # the partial write is removed
    kept = torch.load(disk / "last.pt", weights_only=True)  # the last complete checkpoint is intact
    assert kept["state"]["step"] == 4


def test_a_full_disk_under_the_sqlite_store_fails_writes_in_one_line_and_corrupts_nothing(small_disk):
    disk = small_disk.mount(400 * 1024)
    url = f"sqlite:///{disk / 'r.db'}"
    store = Store(url, retry_seconds=60)
    store.create_search(
        "full", requested_trials=0, budget={}, space={}, settings={}, optuna_study_name=None, code_version=None
    )
    result = TrialResult.loss_only(1.0, 1.0)
    result.curve = [CurvePoint(s, s, 1.0, float(s), 1e-3, 200) for s in range(200)]
    written, started = 0, time.monotonic()
    with pytest.raises(StoreError, match="disk is full") as err:
        for number in range(10_000):
            trial = store.start_trial("full", number=number, config={"pad": "x" * 2000})
            store.finish_trial(trial, result)
            written += 1
    assert "\n" not in str(err.value)
    assert time.monotonic() - started < 50  # not retried for the store's 60 s: waiting frees no space
    assert written > 0
    store.close()

    small_disk.resize(8 * 1024 * 1024)  # room again
    engine = create_engine(url)
    with engine.connect() as db:
        assert db.execute(text("PRAGMA integrity_check")).scalar() == "ok"
    engine.dispose()
    with Store(url) as store:
        rows = store.trials("full")
        assert sum(r.status == "completed" for r in rows) >= written  # every committed trial is there
        assert all(len(store.curve(r.id)) == len(result.curve) for r in rows if r.status == "completed")
        store.start_trial("full", number=len(rows), config={})  # and the store takes writes again
