"""Encoding by word (`workers.data.word_encoding`) gives the tokenizer's own ids and bytes per token for any
list of documents: empty documents anywhere (in a row, first, last), an empty list, whitespace-only
documents, NUL characters inside documents, unicode. The reference is the tokenizer encoding each document
alone, the ids joined by the separator."""

import random

import numpy as np
import pytest

from workers.data.documents import read_shipped_texts
from workers.data.tokenizer import HFTokenizer, train_bpe


@pytest.fixture(scope="module")
def bpe():
    """A byte-level BPE of 400 tokens trained on three shipped works (a second or so)."""
    tokenizer = HFTokenizer(train_bpe(read_shipped_texts()[:3], 400), "train:400")
    assert tokenizer.words is not None
    return tokenizer


def own_encoding(bpe: HFTokenizer, docs: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The tokenizer on each document alone, ids joined by the separator; bytes per id from its offsets."""
    words, bpe.words = bpe.words, None
    try:
        ids, counts = bpe.encode(docs)
    finally:
        bpe.words = words
    separator = [[bpe.separator]]
    alone = [bpe.tokenizer.encode(doc, add_special_tokens=False).ids for doc in docs]
    expected = [i for k, doc_ids in enumerate(alone) for part in (separator[:k] + [doc_ids]) for i in part]
    assert ids.tolist() == expected
    return ids, counts


def assert_same_as_the_tokenizer(bpe: HFTokenizer, docs: list[str]) -> None:
    """The word path itself (no fallback) gives the tokenizer's ids, dtypes and bytes per id, and decodes
    to the same documents; the bytes per id sum to the UTF-8 bytes of the documents and separators."""
    ids, counts = bpe.words.encode(docs)
    expected_ids, expected_counts = own_encoding(bpe, docs)
    assert ids.tolist() == expected_ids.tolist(), docs
    assert counts.tolist() == expected_counts.tolist(), docs
    assert (ids.dtype, counts.dtype) == (expected_ids.dtype, expected_counts.dtype)
    assert int(counts.sum()) == len("\x00".join(docs).encode("utf-8"))
    assert bpe.decode(ids) == bpe.decode(expected_ids)


EDGE_CASES = [
    ["abc def", "", "ghi", "", "", "jkl"],
    [],
    [""],
    ["", ""],
    ["", "", ""],
    ["", "first"],
    ["last", ""],
    ["x ", "", " y"],
    ["   "],
    ["\n", "\n\n", " \t", ""],
    ["trailing   ", "  leading"],
    ["\x00"],
    ["\x00", "", "\x00\x00"],
    ["a\x00b", " \x00 ", "\x00 x"],
    ["'", "s", "it'", "s", "'ll", "''s"],
    ["é", "", "🙂", "日本語", "a\u0301", "١٢٣", "\u00a0\u3000"],
]


@pytest.mark.parametrize("docs", EDGE_CASES, ids=repr)
def test_edge_cases_give_the_tokenizer_s_own_encoding(bpe, docs):
    assert_same_as_the_tokenizer(bpe, docs)


FRAGMENTS = [
    "",
    "",
    "",
    " ",
    "  ",
    "\n",
    "\t",
    "\r\n",
    "\x00",
    "'",
    "'s",
    "'ll",
    "word",
    " the",
    "Hello",
    "42",
    " 7",
    "!?",
    "—",
    "é",
    "naïve",
    "日本",
    "🙂",
    "a\u0301",
    "\u00a0",
    "\u3000",
    "١٢",
]


def random_documents(rng: random.Random) -> list[str]:
    """0 to 8 documents, each 0 to 5 fragments: a third of the fragments empty, so empty documents are common."""
    return ["".join(rng.choices(FRAGMENTS, k=rng.randint(0, 5))) for _ in range(rng.randint(0, 8))]


def test_random_document_lists_give_the_tokenizer_s_own_encoding(bpe):
    """300 seeded lists of documents; each is encoded by a fresh encoder and by the one that has seen all
    before it (its word table grows across calls)."""
    rng = random.Random(0)
    fresh = HFTokenizer(bpe.tokenizer, bpe.spec)
    for _ in range(300):
        docs = random_documents(rng)
        assert_same_as_the_tokenizer(bpe, docs)
        fresh.words = HFTokenizer(bpe.tokenizer, bpe.spec).words
        assert fresh.words.encode(docs)[0].tolist() == bpe.words.encode(docs)[0].tolist()


def test_documents_over_several_chunks(bpe, monkeypatch):
    """Chunks of documents are joined by one separator, empty documents at chunk edges included."""
    monkeypatch.setattr("workers.data.word_encoding.CHUNK_CHARS", 16)
    docs = ["", "abc def ghi", "", "", "x" * 40, "", "tail ", ""]
    assert_same_as_the_tokenizer(bpe, docs)
