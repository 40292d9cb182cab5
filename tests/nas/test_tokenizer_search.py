"""A search with a trained BPE, end to end through the CLI: the vocabulary set from the tokenizer and
padded, FLOPs at that vocabulary, bits per byte stored, `nas list` warning across tokenizers, an
export carrying the tokenizer, `nas pretrain` using it and refusing a corpus tokenised otherwise;
and bad tokenizer or shard input failing in one line with nothing written.
"""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_cli_errors import nas, one_error_line  # noqa: F401 (`nas` is a fixture)

from nas.store import Store
from search_spaces.residual_lm import ArchConfig, flops_per_token
from workers.data.shards import write_meta, write_stream

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "data" / "tiny_space.yaml"


@pytest.fixture(autouse=True)
def _own_corpus_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RESNAS_CACHE", str(tmp_path / "cache"))


def _shards(folder: Path, vocab_size: int, dtype: str, tokenizer: str = "bytes", n_val: int = 100) -> str:
    folder.mkdir()
    write_stream(folder / "train.bin", [np.arange(1000) % 256], np.dtype(dtype))
    write_stream(folder / "val.bin", [np.arange(n_val) % 256], np.dtype(dtype))
    meta = dict(dtype=dtype, vocab_size=vocab_size, tokenizer=tokenizer, n_train_tokens=1000, n_val_tokens=100)
    write_meta(folder, meta)
    return str(folder)


def _bad_inputs(tmp: Path) -> dict:
    (tmp / "malformed.json").write_text("{ not json")
    (tmp / "empty").mkdir()
    return {
        "missing tokenizer file": (["--tokenizer", str(tmp / "nope.json")], "--tokenizer: no such file"),
        "folder without tokenizer.json": (["--tokenizer", str(tmp / "empty")], "--tokenizer: folder"),
        "malformed tokenizer file": (["--tokenizer", str(tmp / "malformed.json")], "not a tokenizers JSON file"),
        "train:V below 257": (["--tokenizer", "train:100"], "--tokenizer: train:V must have 257 <= V"),
        "train:V absurdly large": (["--tokenizer", "train:999999999"], "--tokenizer: train:V must have"),
        "shard size disagrees with metadata": (["--data", _shards(tmp / "short", 256, "uint16", n_val=99)], "--data:"),
        "vocabulary needs uint32": (["--data", _shards(tmp / "wide", 70_000, "uint16")], "needs uint32, not uint16"),
        "shards of another tokenizer": (
            ["--data", _shards(tmp / "other", 256, "uint16", "sha256:ab")],
            "tokenised with",
        ),
        "padding out of range": (["--pad-vocab", "0"], "--pad-vocab"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing tokenizer file",
        "folder without tokenizer.json",
        "malformed tokenizer file",
        "train:V below 257",
        "train:V absurdly large",
        "shard size disagrees with metadata",
        "vocabulary needs uint32",
        "shards of another tokenizer",
        "padding out of range",
    ],
)
def test_bad_tokenizer_or_shard_input_is_one_line_exit_2_and_writes_nothing(case, tmp_path, nas):  # noqa: F811
    args, message = _bad_inputs(tmp_path)[case]
    db = tmp_path / "r.db"
    done = nas(
        "search", "--name", "bad", "--trial-flops", "2e10", "--space", str(TINY), *args,
        "--storage", f"sqlite:///{db}", "--no-progress",
    )  # fmt: skip
    assert done.exit_code == 2, done.stderr
    assert message in one_error_line(done), done.stderr
    assert not db.exists() or Store(f"sqlite:///{db}").list_searches() == []


@pytest.mark.slow
def test_a_bpe_search_exports_its_tokenizer_and_pretrain_refuses_another(tmp_path, nas, finished_search):  # noqa: F811
    db = finished_search.copy_to(tmp_path)  # holds a search on bytes: `nas list` then warns across two tokenizers
    common = ["--trial-flops", "2e10", "--space", str(TINY), "--rungs", "1", "--workers", "1", "--storage", db,
              "--min-tokens-per-param", "0"]  # fmt: skip
    done = nas("search", "--name", "bpe", "--trials", "2", "--tokenizer", "train:300", "--pad-vocab", "64", *common,
               "--no-progress")  # fmt: skip
    assert done.exit_code == 0, done.stderr
    store = Store(db)
    search = store.get_search("bpe")
    assert search.space["fixed"]["vocab_size"] == 320  # 300 padded to a multiple of 64
    corpus = search.settings["corpus"]
    assert corpus["vocab_size"] == 300 and corpus["tokenizer"].startswith("sha256:")
    rows = [r for r in store.trials("bpe") if r.status == "completed"]
    assert rows
    for r in rows:
        arch = ArchConfig(**r.config["arch"])
        assert arch.vocab_size == 320 and r.executed_flops_per_token == pytest.approx(flops_per_token(arch).executed)
        assert 0.4 < r.val_bpb / r.val_loss * math.log(2) < 0.8  # tokens per byte of a 300-token BPE
    shown = nas("show", "bpe", "--bpb", "--storage", db)
    assert shown.exit_code == 0 and "bits/byte" in shown.stdout

    listed = nas("list", "--storage", db)
    assert "train:300" in listed.stdout and "2 different tokenizers" in " ".join(listed.stdout.split())

    out = tmp_path / "export"
    done = nas("export", "bpe", "--trial", str(rows[0].number), "--out", str(out), "--storage", db)
    assert done.exit_code == 0, done.stderr
    exported = yaml.safe_load((out / f"bpe-trial{rows[0].number}.yaml").read_text())
    assert exported["tokenizer"] == {
        "identity": corpus["tokenizer"],
        "spec": "train:300",
        "vocab_size": 300,
        "file": "bpe-tokenizer.json",
    }
    assert json.loads((out / "bpe-tokenizer.json").read_text())["model"]["type"] == "BPE"

    yaml_file = str(out / f"bpe-trial{rows[0].number}.yaml")
    refused = nas("pretrain", yaml_file, "--tokens", "4000", "--tokenizer", "bytes", "--out", str(tmp_path / "run1"))
    assert refused.exit_code == 2 and "tokenised with bytes" in one_error_line(refused)
    assert not (tmp_path / "run1" / "summary.json").exists()
    done = nas("pretrain", yaml_file, "--tokens", "4000", "--out", str(tmp_path / "run2"))
    assert done.exit_code == 0, done.stderr
    summary = json.loads(done.stdout)  # stdout is the summary alone; the Hugging Face folder is said on stderr
    assert summary["status"] == "completed" and math.isfinite(summary["val_bpb"])
    hf = tmp_path / "run2" / "hf"  # written by pretrain, with the search's BPE (kept beside final.pt)
    assert f"Hugging Face folder: {hf}" in done.stderr
    kept = json.loads((tmp_path / "run2" / "tokenizer.json").read_text())
    assert kept == json.loads((out / "bpe-tokenizer.json").read_text())
    assert json.loads((hf / "tokenizer.json").read_text())["model"]["vocab"] == kept["model"]["vocab"]
