"""The data module: real files, real `datasets` (offline), caches in tmp dirs only."""

from __future__ import annotations

import os

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # the hub is never needed here

import gzip
import json
import random
from pathlib import Path

import datasets
import pandas as pd
import pydantic
import pytest
import torch

from workers import byte_tokens, read_shipped_texts, shipped_corpus_path
from workers.data.batches import TrainBatches, validation_batches
from workers.data.config import DataConfig
from workers.data.corpus import SEPARATOR, VOCAB_SIZE, TokenizedCorpus, load_corpus
from workers.data.documents import decode_tokens, split_documents

SHIPPED_CONFIGS = {"default": {}, "wide": {"val_fraction": 0.25, "split_seed": 3}}


def raw_shipped() -> list[str]:
    """Oracle: the shipped works read with gzip + json, independently of the module."""
    with gzip.open(shipped_corpus_path(), "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def as_bytes(tokens: torch.Tensor) -> bytes:
    return tokens.to(torch.uint8).numpy().tobytes()


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> dict[str, tuple[DataConfig, TokenizedCorpus]]:
    """The shipped corpus under two split settings, each built once into its own tmp cache."""
    out = {}
    for key, overrides in SHIPPED_CONFIGS.items():
        cfg = DataConfig(cache_dir=str(tmp_path_factory.mktemp(f"cache-{key}")), **overrides)
        out[key] = (cfg, load_corpus(cfg))
    return out


# --------------------------------------------------------------------------- shipped corpus


@pytest.mark.parametrize("key", SHIPPED_CONFIGS)
def test_shipped_corpus_split_by_whole_documents(shipped, key):
    cfg, corpus = shipped[key]
    raw = raw_shipped()
    assert corpus.vocab_size == VOCAB_SIZE == 256 and corpus.name == "shipped:shakespeare"
    assert corpus.train.dtype == corpus.val.dtype == torch.uint8 and corpus.train.dim() == 1
    assert corpus.n_train_docs >= 1 and corpus.n_val_docs >= 1
    assert corpus.n_train_docs + corpus.n_val_docs == len(raw) == 42
    frac = corpus.val.numel() / (corpus.train.numel() + corpus.val.numel())
    assert 0.1 * cfg.val_fraction < frac < 3 * cfg.val_fraction, frac
    # every segment between separators is one complete work; each work is in exactly one split
    train_docs, val_docs = decode_tokens(corpus.train), decode_tokens(corpus.val)
    assert (len(train_docs), len(val_docs)) == (corpus.n_train_docs, corpus.n_val_docs)
    assert sorted(train_docs + val_docs) == sorted(raw)
    assert not set(train_docs) & set(val_docs)


@pytest.mark.parametrize("key", SHIPPED_CONFIGS)
def test_separator_structure(shipped, key):
    _, corpus = shipped[key]
    assert not any("\x00" in t for t in raw_shipped())  # NUL never occurs in the text
    for stream, n_docs in ((corpus.train, corpus.n_train_docs), (corpus.val, corpus.n_val_docs)):
        assert int((stream == SEPARATOR).sum()) == n_docs - 1  # between documents only
        assert stream[0] != SEPARATOR and stream[-1] != SEPARATOR


def test_load_is_deterministic_and_second_load_hits_cache(shipped, tmp_path, monkeypatch):
    cfg, first = shipped["default"]
    fresh = load_corpus(cfg.model_copy(update={"cache_dir": str(tmp_path / "fresh")}))  # rebuilt from scratch
    assert torch.equal(fresh.train, first.train) and torch.equal(fresh.val, first.val)
    assert fresh.fingerprint == first.fingerprint

    def refuse(*args, **kwargs):
        raise AssertionError("datasets.load_dataset called although the corpus is cached")

    monkeypatch.setattr(datasets, "load_dataset", refuse)
    again = load_corpus(cfg)
    assert torch.equal(again.train, first.train) and torch.equal(again.val, first.val)
    assert (again.n_train_docs, again.n_val_docs, again.fingerprint) == (
        first.n_train_docs,
        first.n_val_docs,
        first.fingerprint,
    )
    entry = Path(cfg.cache_dir) / "corpora" / first.fingerprint
    assert sorted(p.name for p in entry.iterdir()) == [
        "meta.json",
        "train.bin",
        "val.bin",
        "val_bytes.bin",
    ]  # no temp files left
    # another split is another cache entry, hence needs datasets again
    with pytest.raises(AssertionError, match="load_dataset called"):
        load_corpus(cfg.model_copy(update={"split_seed": 99}))


@pytest.mark.parametrize("key", SHIPPED_CONFIGS)
def test_validation_text_never_in_training_batches(shipped, key):
    """No 64-byte piece of a validation work occurs in what TrainBatches emits.

    Why this suffices: (1) we check that one epoch of TrainBatches emits exactly the windows
    of the train stream, each once, so any byte string inside a training window is inside
    the train stream; (2) the split never cuts a document, so a leaked validation work would
    put ALL its 64-byte pieces into the train stream, and we sample dozens from every
    validation work.  Pieces that also occur in some training work (shared phrases between
    plays, not leakage) are excluded; we check that this exclusion is rare so the test keeps
    its teeth, and as a positive control the same search finds pieces of training works.
    """
    _, corpus = shipped[key]
    seq_len, batch = 256, 32
    batches = TrainBatches(corpus.train, seq_len, batch, seed=0)
    n_batches = -(-batches.n_windows // batch)
    emitted = []
    for _ in range(n_batches):
        x, y = next(batches)
        emitted.append(torch.cat([x, y[:, -1:]], dim=1))
    emitted_windows = torch.cat(emitted)[: batches.n_windows].to(torch.uint8)
    stream_windows = corpus.train.unfold(0, seq_len + 1, seq_len)
    assert sorted(map(as_bytes, emitted_windows)) == sorted(map(as_bytes, stream_windows))

    train_bytes = as_bytes(corpus.train)
    train_docs = [d.encode() for d in decode_tokens(corpus.train)]
    val_docs = [d.encode() for d in decode_tokens(corpus.val)]
    rng = random.Random(0)
    per_doc = max(40, 400 // len(val_docs))
    pieces = [d[i : i + 64] for d in val_docs for i in (rng.randrange(len(d) - 64) for _ in range(per_doc))]
    others = [d.encode() for d in raw_shipped() if d.encode() not in set(val_docs)]  # oracle, not the stream
    shared = [p for p in pieces if any(p in d for d in others)]
    assert len(shared) <= 0.05 * len(pieces), len(shared)
    leaked = [p for p in pieces if p not in shared and p in train_bytes]
    assert not leaked
    controls = [d[i : i + 64] for d in train_docs[:20] for i in (rng.randrange(len(d) - 64) for _ in range(5))]
    assert all(p in train_bytes for p in controls)


# --------------------------------------------------------------------------- local files

DOCS = [
    f"Document {i} about the {animal}.\n\nIt has a second paragraph, line {i}a.\nAnd line {i}b: {animal * 3}.\n"
    for i, animal in enumerate(
        [
            "aardvark",
            "bison",
            "capybara",
            "dingo",
            "echidna",
            "fossa",
            "gerenuk",
            "hoatzin",
            "ibex",
            "jerboa",
            "kinkajou",
            "lemur",
            "margay",
            "numbat",
        ]
    )
]


def check_local_split(corpus: TokenizedCorpus, docs: list[str], val_fraction: float, seed: int = 0) -> None:
    """The corpus holds exactly ``docs``, split as the documented hash rule says."""
    want_train, want_val = split_documents(docs, val_fraction, seed)
    assert decode_tokens(corpus.train) == want_train and decode_tokens(corpus.val) == want_val
    assert (corpus.n_train_docs, corpus.n_val_docs) == (len(want_train), len(want_val))
    assert want_train and want_val and sorted(want_train + want_val) == sorted(docs)


def test_local_text_files_one_file_per_document(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    for i, doc in enumerate(DOCS):
        (folder / f"doc{i:02d}.txt").write_text(doc, encoding="utf-8")
    (folder / "notes.md").write_text("not a data file")
    corpus = load_corpus(DataConfig(source=str(folder), val_fraction=0.3, cache_dir=str(tmp_path / "c")))
    check_local_split(corpus, DOCS, 0.3)  # paragraphs and lines were NOT split into documents
    assert corpus.name == f"local:{folder.resolve()}"
    single = load_corpus(DataConfig(source=str(folder / "doc03.txt"), cache_dir=str(tmp_path / "c")))
    assert decode_tokens(single.train) == [DOCS[3]] and single.val.numel() == 0


def test_local_jsonl_json_and_parquet(tmp_path):
    records = [{"id": i, "body": doc} for i, doc in enumerate(DOCS)]
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    as_json = tmp_path / "docs.json"
    as_json.write_text(json.dumps(records), encoding="utf-8")
    parquet = tmp_path / "docs.parquet"
    pd.DataFrame({"text": DOCS, "id": range(len(DOCS))}).to_parquet(parquet)
    cache = str(tmp_path / "cache")
    for path, field in ((jsonl, "body"), (as_json, "body"), (parquet, "text")):
        corpus = load_corpus(DataConfig(source=str(path), text_field=field, val_fraction=0.3, cache_dir=cache))
        check_local_split(corpus, DOCS, 0.3)
    # same documents, same split, whatever the format; another seed moves documents
    other = load_corpus(DataConfig(source=str(parquet), val_fraction=0.3, split_seed=7, cache_dir=cache))
    assert decode_tokens(other.val) != decode_tokens(corpus.val)


def test_local_file_change_invalidates_cache(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS[:4]), encoding="utf-8")
    cfg = DataConfig(source=str(path), val_fraction=0.5, cache_dir=str(tmp_path / "cache"))
    before = load_corpus(cfg)
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS[:6]), encoding="utf-8")
    after = load_corpus(cfg)
    assert after.fingerprint != before.fingerprint
    assert after.n_train_docs + after.n_val_docs == 6


def test_bad_sources_and_fields_raise_clear_errors(tmp_path):
    cache = str(tmp_path / "cache")
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"body": d}) + "\n" for d in DOCS), encoding="utf-8")
    with pytest.raises(ValueError, match="no text field 'nope'"):
        load_corpus(DataConfig(source=str(path), text_field="nope", cache_dir=cache))
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"text": ""}) + "\n" + json.dumps({"text": None}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="empty"):
        load_corpus(DataConfig(source=str(empty), cache_dir=cache))
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        load_corpus(DataConfig(source=str(tmp_path / "missing.txt"), cache_dir=cache))


def test_config_validation_names_the_field():
    with pytest.raises(pydantic.ValidationError, match="val_fraction"):
        DataConfig(val_fraction=0.7)
    with pytest.raises(pydantic.ValidationError, match="val_fraction"):
        DataConfig(val_fraction=0.0)
    with pytest.raises(pydantic.ValidationError, match="shuffle"):
        DataConfig(shuffle=True)
    with pytest.raises(pydantic.ValidationError):
        DataConfig().val_fraction = 0.1  # frozen
    assert issubclass(pydantic.ValidationError, ValueError)


def test_cache_dir_defaults_to_env(tmp_path, monkeypatch):
    monkeypatch.setenv("RESNAS_CACHE", str(tmp_path / "envcache"))
    assert DataConfig().resolved_cache_dir() == tmp_path / "envcache"
    texts = read_shipped_texts()  # the old helpers keep working, now through datasets
    assert texts == raw_shipped()
    tokens = byte_tokens(texts[:2])
    assert tokens.dtype == torch.int64 and tokens.numel() == sum(len(t.encode()) for t in texts[:2]) + 1
    assert int((tokens == SEPARATOR).sum()) == 1
    assert (tmp_path / "envcache").is_dir()


# --------------------------------------------------------------------------- batches

SEQ = 8


def arange_stream(n_windows: int) -> torch.Tensor:
    """A stream whose every token is distinct, so window k starts with token k * SEQ."""
    return torch.arange(n_windows * SEQ + 1)


def window_ids(x: torch.Tensor) -> list[int]:
    return (x[:, 0] // SEQ).tolist()


def test_train_batches_shapes_and_targets():
    x, y = next(TrainBatches(arange_stream(40).to(torch.uint8), SEQ, 4, seed=0))
    assert x.shape == y.shape == (4, SEQ) and x.dtype == y.dtype == torch.int64
    x, y = next(TrainBatches(arange_stream(40), SEQ, 4, seed=0))
    assert torch.equal(y[:, :-1], x[:, 1:]) and torch.equal(y, x + 1)
    assert all(int(s) % SEQ == 0 for s in x[:, 0])  # windows start seq_len apart
    with pytest.raises(ValueError, match="batch_size"):
        TrainBatches(arange_stream(3), SEQ, 4)


@pytest.mark.parametrize("batch", [4, 7])  # 40 windows: a multiple of the batch, and not
def test_train_batches_every_window_once_per_epoch(batch):
    batches = TrainBatches(arange_stream(40), SEQ, batch, seed=1)
    ids = [i for _ in range(3 * 40 // batch + 1) for i in window_ids(next(batches)[0])]
    epochs = [ids[e * 40 : (e + 1) * 40] for e in range(3)]
    assert all(sorted(ep) == list(range(40)) for ep in epochs)
    assert epochs[0] != epochs[1] != epochs[2]  # reshuffled every epoch
    assert batches.epoch == 3


def test_train_batches_seeded():
    def order(seed):
        b = TrainBatches(arange_stream(40), SEQ, 4, seed=seed)
        return [window_ids(next(b)[0]) for _ in range(10)]

    assert order(5) == order(5)
    assert order(5) != order(6)


@pytest.mark.parametrize("stop", [3, 10, 17])  # mid-epoch, at the epoch boundary, in epoch 2
def test_train_batches_resume_reproduces_continuation(stop):
    stream = arange_stream(40)
    reference = TrainBatches(stream, SEQ, 4, seed=2)
    expected = [next(reference) for _ in range(30)]
    first = TrainBatches(stream, SEQ, 4, seed=2)
    for _ in range(stop):
        next(first)
    state = json.loads(json.dumps(first.state_dict()))  # survives a checkpoint round trip
    resumed = TrainBatches(stream, SEQ, 4, seed=2)
    resumed.load_state_dict(state)
    for want in expected[stop:]:
        got = next(resumed)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    with pytest.raises(ValueError, match="seq_len"):
        TrainBatches(stream, 4, 4, seed=2).load_state_dict(state)


def test_validation_batches_fixed_and_from_val_stream(shipped):
    _, corpus = shipped["default"]
    seq_len = 128
    first = validation_batches(corpus.val, seq_len, n_sequences=20, batch_size=8)
    second = validation_batches(corpus.val, seq_len, n_sequences=20, batch_size=8)
    assert [x.shape[0] for x, _ in first] == [8, 8, 4]
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, second, strict=False))
    windows = torch.cat([torch.cat([x, y[:, -1:]], dim=1) for x, y in first])
    total = (corpus.val.numel() - 1) // seq_len  # non-overlapping windows in the stream
    starts = [k * (total - 1) // 19 * seq_len for k in range(20)]  # spread evenly, first to last
    assert starts[-1] + seq_len + 1 <= corpus.val.numel() < starts[-1] + 2 * seq_len + 1
    for start, w in zip(starts, windows, strict=True):
        assert torch.equal(w, corpus.val[start : start + seq_len + 1].long())
    assert all(x.dtype == y.dtype == torch.int64 and torch.equal(x[:, 1:], y[:, :-1]) for x, y in first)


def test_validation_batches_short_streams():
    stream = arange_stream(5)
    got = validation_batches(stream, SEQ, n_sequences=100, batch_size=2)
    assert sum(x.shape[0] for x, _ in got) == 5  # fewer when the stream is short
    with pytest.raises(ValueError, match="shorter than one window"):
        validation_batches(stream[:SEQ], SEQ, n_sequences=1, batch_size=1)
