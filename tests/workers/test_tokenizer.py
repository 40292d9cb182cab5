"""Tokenizers and token shards: a real byte-level BPE trained by `tokenizers` on the shipped corpus.

What is checked: round trips, determinism, the cache keyed by tokenizer, the bytes each token covers
summing to the text's UTF-8 bytes exactly (so bits per byte are exact), the shards memory-mapped
(not copied) in another process, shards written by another pipeline read and checked, FLOPs and
parameters at the tokenizer's vocabulary.
"""

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from search_spaces.residual_lm import ArchConfig, build_model, flops_per_token
from workers.data.batches import bits_per_byte, validation_batches, validation_tokens_per_byte
from workers.data.config import DataConfig
from workers.data.corpus import corpus_fingerprint, load_corpus
from workers.data.documents import read_shipped_texts, split_documents
from workers.data.shards import ShardError, read_meta, write_meta, write_stream
from workers.data.tokenizer import HFTokenizer, TokenizerError, load_tokenizer, normalised_spec, train_bpe
from workers.training.config import RunConfig
from workers.training.train import train
from workers.trial.run import run_trial

VOCAB = 512
KNOWN = ["naïve café — 日本語 🙂 tokens", "plain ASCII text, twice: plain ASCII text", "ä" * 40]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("resnas-cache")


@pytest.fixture(scope="module")
def bpe_corpus(cache):
    return load_corpus(DataConfig(tokenizer=f"train:{VOCAB}", cache_dir=str(cache)))


@pytest.fixture(scope="module")
def bpe(bpe_corpus):
    tokenizer = load_tokenizer(bpe_corpus.tokenizer_spec, list, bpe_corpus.path)
    assert isinstance(tokenizer, HFTokenizer)
    return tokenizer


def test_trained_bpe_round_trips_and_is_deterministic(bpe, bpe_corpus):
    train_docs, _ = split_documents(read_shipped_texts(), 0.05, 0)
    assert bpe.vocab_size == bpe_corpus.vocab_size == VOCAB
    assert bpe.identity == HFTokenizer(train_bpe(train_docs, VOCAB), "again").identity  # retrained: same BPE
    ids, _ = bpe.encode(train_docs[:3] + KNOWN)
    assert bpe.decode(ids) == train_docs[:3] + KNOWN
    _, val_docs = split_documents(read_shipped_texts(), 0.05, 0)
    assert bpe.decode(bpe_corpus.val.numpy()) == val_docs  # the stored shard decodes to the held-out works
    # compression: a BPE of 512 tokens packs the shipped text at ~1.9 bytes per token
    assert bpe_corpus.n_train_bytes / bpe_corpus.train.numel() > 1.5


# words the pre-tokenizer's rules treat apart: contractions, whitespace runs before words and at the end,
# multi-byte characters split across tokens, digits in other scripts, separators that are \s only in Unicode
TRICKY = [
    "héllo wörld — “quoted” 😀😀 emoji's 'tis he'll we're I've   spaced\n\n  lines\t\ttabs 123 4.5 ½ ２３ 中文字符",
    "١٢٣ \u00a0nbsp \u2028sep \u3000ideographic 's 'S ''s !'s ' s don't rock'n'roll\r\n end   ",
    "a\u0301\u0302 combining ﬁ ligature ǅ Ελληνικά русский עברית हिन्दी 한국어 🙂 🙃",
    "  x  \n y \n\nz",
    "'",
    "'ll",
    " ",
    "x",
]


def test_encoding_by_word_gives_the_ids_and_bytes_of_the_tokenizer_itself(bpe):
    """A byte-level BPE encodes each distinct word once (`word_encoding`); the stream and the bytes per token are
    those of the tokenizer's own encoding, shipped text and pre-tokenizer edge cases alike."""
    docs = read_shipped_texts()[:4] + TRICKY + KNOWN
    assert bpe.words is not None
    by_word = bpe.encode(docs)
    words, bpe.words = bpe.words, None
    try:
        by_tokenizer = bpe.encode(docs)
    finally:
        bpe.words = words
    assert np.array_equal(by_word[0], by_tokenizer[0])
    assert np.array_equal(by_word[1], by_tokenizer[1])
    with_added_token = ["text then <|endoftext|> inside"]  # the tokenizer splits it out first: no word path
    assert np.array_equal(bpe.encode(with_added_token)[0], bpe.tokenizer.encode(with_added_token[0]).ids)


def test_the_shards_are_the_tokenizer_s_own_encoding_byte_for_byte(bpe, bpe_corpus):
    train_docs, val_docs = split_documents(read_shipped_texts(), 0.05, 0)
    words, bpe.words = bpe.words, None
    try:
        (train_ids, _), (val_ids, val_bytes) = bpe.encode(train_docs), bpe.encode(val_docs)
    finally:
        bpe.words = words
    dtype = bpe_corpus.train.numpy().dtype
    assert (bpe_corpus.path / "train.bin").read_bytes() == train_ids.astype(dtype).tobytes()
    assert (bpe_corpus.path / "val.bin").read_bytes() == val_ids.astype(dtype).tobytes()
    assert (bpe_corpus.path / "val_bytes.bin").read_bytes() == val_bytes.astype(np.uint16).tobytes()


def test_bytes_each_token_covers_sum_to_the_utf8_bytes_of_the_text(bpe):
    ids, counts = bpe.encode(KNOWN)
    assert counts.sum() == sum(len(d.encode("utf-8")) for d in KNOWN) + len(KNOWN) - 1  # a separator is a byte
    for doc in KNOWN:  # per document, and for byte-level BPE equal to the token's own bytes
        doc_ids, doc_counts = bpe.encode([doc])
        assert doc_counts.sum() == len(doc.encode("utf-8"))
    table = bpe.token_bytes()
    assert table[ids].sum() == counts.sum()


def test_the_cache_is_keyed_by_tokenizer(cache, bpe_corpus):
    keys = {
        spec: corpus_fingerprint(DataConfig(tokenizer=spec, cache_dir=str(cache)))
        for spec in ("bytes", "train:512", "train:1024")
    }
    assert len(set(keys.values())) == 3
    assert bpe_corpus.fingerprint == keys["train:512"]
    byte_corpus = load_corpus(DataConfig(cache_dir=str(cache)))
    assert byte_corpus.path != bpe_corpus.path and byte_corpus.train.dtype == torch.uint8
    assert bpe_corpus.train.dtype == torch.uint16 and read_meta(bpe_corpus.path)["dtype"] == "uint16"
    assert byte_corpus.n_train_bytes == bpe_corpus.n_train_bytes  # the same text, two tokenisations
    again = load_corpus(DataConfig(tokenizer="train:512", cache_dir=str(cache)))
    assert torch.equal(again.train, bpe_corpus.train) and again.tokenizer == bpe_corpus.tokenizer


def test_a_tokenizer_file_is_keyed_by_its_content(tmp_path, bpe):
    path = tmp_path / "tok" / "tokenizer.json"
    path.parent.mkdir()
    path.write_text(bpe.to_str())
    by_folder = load_tokenizer(str(path.parent), list, tmp_path)
    assert by_folder.identity == bpe.identity and normalised_spec(str(path.parent)) == str(path)
    by_file = DataConfig(tokenizer=str(path), cache_dir=str(tmp_path / "c"))
    assert corpus_fingerprint(by_file) != corpus_fingerprint(by_file.model_copy(update={"tokenizer": "bytes"}))


def test_bits_per_byte_are_exact_on_the_validation_windows(bpe_corpus, bpe):
    seq_len, n = 64, 12
    windows = torch.cat([torch.cat([x, y[:, -1:]], 1) for x, y in validation_batches(bpe_corpus.val, seq_len, n, 4)])
    table = torch.from_numpy(bpe.token_bytes().astype(np.int64))
    n_bytes = int(table[windows[:, 1:]].sum())  # the targets' bytes, from the token table (exact: byte-level)
    ratio = validation_tokens_per_byte(bpe_corpus, seq_len, n)
    assert ratio == pytest.approx(windows[:, 1:].numel() / n_bytes, rel=1e-12)
    assert bits_per_byte(2.0, ratio) == pytest.approx(2.0 * windows[:, 1:].numel() / n_bytes / math.log(2))


def test_a_trial_reports_exact_bpb_and_counts_flops_at_the_vocabulary(bpe_corpus):
    cfg = ArchConfig(vocab_size=576, seq_len=32, n_layers=1, d_model=32, n_heads=2, mlp_ratio=2.0)
    model = build_model(cfg)
    assert model.tok_emb.weight.shape == (576, 32) and model.lm_head.weight.shape == (576, 32)
    assert flops_per_token(cfg).executed_breakdown["unembed"] == 2 * 32 * 576  # the head: 2 d V per token
    unpadded = flops_per_token(cfg.model_copy(update={"vocab_size": 512})).executed
    assert flops_per_token(cfg).executed - unpadded == pytest.approx(2 * 32 * 64)  # padding is counted

    run = RunConfig(batch_size=4, eval_sequences=8, evals=1)
    result = run_trial(cfg, 2e9, bpe_corpus, run=run, width_probe=False)
    assert result.status == "completed", result.failure_reason
    ratio = validation_tokens_per_byte(bpe_corpus, cfg.seq_len, run.eval_sequences)
    assert 0.3 < ratio < 0.7
    assert result.val_bpb == pytest.approx(result.val_loss * ratio / math.log(2), rel=1e-12)
    with pytest.raises(ValueError, match="vocab_size=256 is smaller"):
        train(cfg.model_copy(update={"vocab_size": 256}), 2e9, bpe_corpus, run=run)


def test_shards_are_memory_mapped_not_copied_in_another_process(bpe_corpus, cache):
    """A fresh process loads the cached corpus: its train tensor's memory lies inside a mapping of train.bin."""
    code = f"""
import json, os
from workers.data.config import DataConfig
from workers.data.corpus import load_corpus
c = load_corpus(DataConfig(tokenizer="train:{VOCAB}", cache_dir={str(cache)!r}))
ptr = c.train.data_ptr()
target = os.path.realpath(str(c.path / "train.bin"))
hits = []
for line in open("/proc/self/maps"):
    parts = line.split()
    lo, hi = (int(x, 16) for x in parts[0].split("-"))
    if len(parts) >= 6 and os.path.realpath(parts[5]) == target:
        hits.append(lo <= ptr < hi)
print(json.dumps({{"mapped": any(hits), "n": c.train.numel()}}))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"mapped": True, "n": bpe_corpus.train.numel()}


def _shard_folder(path, ids_train, ids_val, **meta):
    path.mkdir(parents=True, exist_ok=True)
    dtype = np.dtype(meta.get("dtype", "uint16"))
    n_train = write_stream(path / "train.bin", [ids_train], dtype)
    n_val = write_stream(path / "val.bin", [ids_val], dtype)
    write_meta(path, {"dtype": dtype.name, "n_train_tokens": n_train, "n_val_tokens": n_val, **meta})
    return path


def test_a_shard_folder_from_another_pipeline_is_read_and_checked(tmp_path, bpe, bpe_corpus):
    docs = read_shipped_texts()[:3]
    ids, _ = bpe.encode(docs)
    tok = tmp_path / "tokenizer.json"
    tok.write_text(bpe.to_str())
    folder = _shard_folder(tmp_path / "shards", ids[:-4000], ids[-4000:], vocab_size=VOCAB, tokenizer=bpe.identity)
    corpus = load_corpus(DataConfig(source=str(folder), tokenizer=str(tok)))
    assert torch.equal(corpus.train.long(), torch.from_numpy(ids[:-4000]))
    assert corpus.val_bytes is not None and int(corpus.val_bytes.sum()) == int(bpe.token_bytes()[ids[-4000:]].sum())
    with pytest.raises(ShardError, match="tokenised with"):
        load_corpus(DataConfig(source=str(folder)))  # bytes is not the tokenizer that wrote them
    (folder / "val.bin").write_bytes((folder / "val.bin").read_bytes()[:-2])
    with pytest.raises(ShardError, match="val.bin holds 7998 bytes, but meta.json says 4000 tokens"):
        load_corpus(DataConfig(source=str(folder), tokenizer=str(tok)))


def test_bad_tokenizers_and_shards_fail_in_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"not": "a tokenizer"}')
    for spec, message in [
        ("train:256", "257 <= V"),
        ("train:10000000", "524,288"),
        ("train:many", "integer V"),
        (str(tmp_path / "missing.json"), "no such file"),
        (str(tmp_path / "empty"), "holds no tokenizer.json"),
    ]:
        with pytest.raises(TokenizerError, match=message):
            normalised_spec(spec)
    with pytest.raises(TokenizerError, match="is not a tokenizers JSON file"):
        load_tokenizer(str(bad), list, tmp_path)
    folder = _shard_folder(tmp_path / "wide", np.arange(100), np.arange(10), vocab_size=70_000, tokenizer="bytes")
    with pytest.raises(ShardError, match="70000 tokens needs uint32, not uint16"):
        read_meta(folder)
