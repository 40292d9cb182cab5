"""The corpus a trial trains on: `DataConfig`, and each (source, tokeniser, split) tokenised once into a
cache of memory-mapped token shards (`load_corpus`).

`load_corpus` decides the source once (`documents.resolve_source`: a shard folder, local files, a hub dataset),
maps a shard folder as it is, and otherwise reads the cache entry or builds it in one line of calls: read
(`documents.read_documents`), split (`documents.split_documents`), tokenise and write (`write_corpus`).
The tokeniser is ``DataConfig.tokenizer`` (`workers.data.tokenizer`: bytes, train:V, a file or a hub name);
documents are joined by the tokeniser's separator. Batches are `workers.data.batches`.

Each (source, tokeniser, split) is tokenised once into memory-mapped shards under ``cache_dir``
(`workers.data.shards`), keyed by a fingerprint of the source, the tokeniser's identity and the split;
trial processes map them read-only, so the processes of one machine share the page cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import shards
from .config import DataConfig
from .documents import HubDataset, LocalFiles, ShardFolder, read_documents, resolve_source, split_documents
from .progress import TokenisingProgress
from .tokenizer import BYTES, HFTokenizer, load_tokenizer, token_dtype

logger = logging.getLogger(__name__)

VOCAB_SIZE = 256  # of the byte tokeniser
SEPARATOR = 0
CACHE_FORMAT = 2


@dataclass
class TokenizedCorpus:
    """Tokenised train and validation streams: 1-D tensors over memory-mapped shards (uint8 for
    bytes, else uint16 or uint32), documents joined by the tokeniser's ``separator``.

    ``val_bytes[i]``: UTF-8 bytes of text validation token i covers (`workers.data.tokenizer`), so the
    bytes of any validation window are exact.  ``tokenizer``: the tokeniser's identity.
    ``path``: the shard folder (with ``tokenizer.json`` for a non-byte tokeniser).
    """

    train: torch.Tensor
    val: torch.Tensor
    vocab_size: int
    name: str
    n_train_docs: int
    n_val_docs: int
    fingerprint: str
    val_bytes: torch.Tensor | None = None  # None: one byte per token
    tokenizer: str = BYTES
    tokenizer_spec: str = BYTES
    separator: int = SEPARATOR
    n_train_bytes: int | None = None
    path: Path | None = None

    def summary(self) -> dict[str, Any]:
        """What a search stores about its corpus: name, fingerprint, tokeniser, vocabulary, sizes."""
        return {
            "name": self.name,
            "fingerprint": self.fingerprint,
            "tokenizer": self.tokenizer,
            "tokenizer_spec": self.tokenizer_spec,
            "vocab_size": self.vocab_size,
            "n_train_tokens": int(self.train.numel()),
            "n_train_bytes": self.n_train_bytes,
        }


# --------------------------------------------------------------------------- cache


def _tokenizer_key(cfg: DataConfig) -> str:
    """The tokeniser's part of the cache key: its identity when known without training or a
    download (bytes, a file), else its spec (a trained BPE is a function of the source and split,
    which the key holds too; a hub tokenizer is fetched once, and its identity kept in the entry)."""
    if cfg.tokenizer == BYTES:
        return BYTES
    if cfg.tokenizer.startswith("train:"):
        import tokenizers

        return f"{cfg.tokenizer}/tokenizers-{tokenizers.__version__}"
    if Path(cfg.tokenizer).is_file():
        return load_tokenizer(cfg.tokenizer, list, Path()).identity
    return f"hub:{cfg.tokenizer}"


def corpus_fingerprint(cfg: DataConfig, source: LocalFiles | HubDataset | None = None) -> str:
    """Cache key: hash of the source's identity (`resolve_source(cfg)` unless given), the tokeniser and the split."""
    source = source or _text_source(cfg)
    key = {
        "format": CACHE_FORMAT,
        "source": source.identity(),
        "text_field": cfg.text_field,
        "tokenizer": _tokenizer_key(cfg),
        "val_fraction": cfg.val_fraction,
        "split_seed": cfg.split_seed,
    }
    blob = json.dumps(key, sort_keys=True).encode("utf-8")
    return hashlib.blake2b(blob, digest_size=12).hexdigest()


def _open_corpus(folder: Path, meta: dict[str, Any]) -> TokenizedCorpus:
    """The corpus of a shard folder: memory-mapped streams, its metadata."""
    train = shards.open_stream(folder / "train.bin", meta["dtype"], meta["n_train_tokens"])
    val = shards.open_stream(folder / "val.bin", meta["dtype"], meta["n_val_tokens"])
    val_bytes = None
    if (folder / shards.VAL_BYTES).exists():
        val_bytes = shards.open_stream(folder / shards.VAL_BYTES, np.uint16, meta["n_val_tokens"])
    return TokenizedCorpus(
        train=train,
        val=val,
        vocab_size=meta["vocab_size"],
        name=meta.get("name", f"shards:{folder}"),
        n_train_docs=meta.get("n_train_docs", 0),
        n_val_docs=meta.get("n_val_docs", 0),
        fingerprint=meta.get("fingerprint", ""),
        val_bytes=val_bytes,
        tokenizer=meta["tokenizer"],
        tokenizer_spec=meta.get("tokenizer_spec", meta["tokenizer"]),
        separator=meta["separator"] if meta.get("separator") is not None else SEPARATOR,
        n_train_bytes=meta.get("n_train_bytes"),
        path=folder,
    )


def _read_cache(entry: Path) -> TokenizedCorpus | None:
    """The cached corpus in ``entry``, or None if absent or inconsistent."""
    if not (entry / shards.META).exists():
        return None
    try:
        return _open_corpus(entry, shards.read_meta(entry))
    except (OSError, ValueError):
        logger.warning("ignoring inconsistent cache entry %s", entry)
        return None


def _encoded_chunks(tokenizer, docs: Sequence[str], progress: TokenisingProgress):
    """(ids, bytes per id) of consecutive groups of documents (`_groups`), the groups joined by the separator."""
    for start, group in _groups(docs):
        ids, counts = tokenizer.encode(group)
        if start:
            ids = np.concatenate([[tokenizer.separator], ids])
            counts = np.concatenate([np.ones(1, dtype=np.uint16), counts])
        yield ids, counts
        progress.advance(sum(len(d) for d in group))


def _groups(docs: Sequence[str], max_docs: int = 4096, max_chars: int = 1 << 23):
    """(index of its first document, group) of consecutive documents, at most `max_docs` and about `max_chars`
    characters each: large enough for a tokenizer's batches and word cache, small enough to stream."""
    start, size = 0, 0
    for i, doc in enumerate(docs):
        if i > start and (i - start == max_docs or size + len(doc) > max_chars):
            yield start, docs[start:i]
            start, size = i, 0
        size += len(doc)
    if start < len(docs):
        yield start, docs[start:]


def _write_split(
    entry: Path, split: str, tokenizer, docs: Sequence[str], progress: TokenisingProgress
) -> tuple[int, int]:
    """Tokenise one split into ``<split>.bin`` (and ``val_bytes.bin``): (tokens, bytes of text)."""
    n_bytes = 0
    byte_chunks: list[np.ndarray] = []

    def ids():
        nonlocal n_bytes
        for chunk_ids, counts in _encoded_chunks(tokenizer, docs, progress):
            n_bytes += int(counts.sum(dtype=np.int64))
            if split == "val":
                byte_chunks.append(counts)
            yield chunk_ids

    n_tokens = shards.write_stream(entry / f"{split}.bin", ids(), token_dtype(tokenizer.vocab_size))
    if split == "val":
        shards.write_stream(entry / shards.VAL_BYTES, byte_chunks, np.dtype(np.uint16))
    return n_tokens, n_bytes


def write_corpus(
    entry: Path, cfg: DataConfig, source: LocalFiles | HubDataset, train_docs: list[str], val_docs: list[str]
) -> TokenizedCorpus:
    """Tokenise the split documents into the shard folder ``entry`` (a trained tokeniser learns from the
    training split), write its metadata last, and open it."""
    entry.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer(cfg.tokenizer, lambda: train_docs, entry)
    if isinstance(tokenizer, HFTokenizer):
        (entry / "tokenizer.json").write_text(tokenizer.to_str(), encoding="utf-8")
    with TokenisingProgress(f"tokenising {source.name}", sum(map(len, train_docs)) + sum(map(len, val_docs))) as bar:
        n_train, train_bytes = _write_split(entry, "train", tokenizer, train_docs, bar)
        n_val, val_bytes = _write_split(entry, "val", tokenizer, val_docs, bar)
    meta = {
        "dtype": token_dtype(tokenizer.vocab_size).name,
        "vocab_size": tokenizer.vocab_size,
        "tokenizer": tokenizer.identity,
        "tokenizer_spec": cfg.tokenizer,
        "separator": tokenizer.separator,
        "n_train_tokens": n_train,
        "n_val_tokens": n_val,
        "n_train_bytes": train_bytes,
        "n_val_bytes": val_bytes,
        "fingerprint": entry.name,
        "name": source.name,
        "config": cfg.model_dump(),
        "n_train_docs": len(train_docs),
        "n_val_docs": len(val_docs),
    }
    shards.write_meta(entry, meta)
    _log_built(meta, cfg, entry)
    return _open_corpus(entry, meta)


def load_corpus(cfg: DataConfig) -> TokenizedCorpus:
    """The tokenised train / validation streams of ``cfg``'s source, from cache when possible.

    A cache hit does not touch ``datasets`` or the tokenizer.  Parallel callers may both build on a
    miss; every file is written atomically and ``meta.json`` last, so no one reads a half-written entry.
    A shard folder given as the source is mapped as it is (`check_shard_source` checks it whole).
    """
    source = resolve_source(cfg)
    if isinstance(source, ShardFolder):
        return _shard_source(cfg, source.path)
    entry = cfg.resolved_cache_dir() / "corpora" / corpus_fingerprint(cfg, source)
    cached = _read_cache(entry)
    if cached is not None:
        logger.debug("corpus %s: cache hit %s", cached.name, entry)
        return cached
    docs = read_documents(source, cfg.text_field, cfg.resolved_cache_dir())
    return write_corpus(entry, cfg, source, *split_documents(docs, cfg.val_fraction, cfg.split_seed))


def _text_source(cfg: DataConfig) -> LocalFiles | HubDataset:
    source = resolve_source(cfg)
    if isinstance(source, ShardFolder):
        raise ValueError(f"{source.name}: a shard folder is used as it is, it has no cache key")
    return source


def _log_built(meta: dict[str, Any], cfg: DataConfig, entry: Path) -> None:
    if meta["n_val_tokens"] == 0:
        logger.warning("corpus %s has a single document: the validation stream is empty", meta["name"])
    logger.info(
        "corpus %s: %d train docs (%d tokens, %d bytes), %d val docs (%d tokens), tokenizer %s, cached in %s",
        meta["name"],
        meta["n_train_docs"],
        meta["n_train_tokens"],
        meta["n_train_bytes"],
        meta["n_val_docs"],
        meta["n_val_tokens"],
        cfg.tokenizer,
        entry,
    )


def _shard_source(cfg: DataConfig, folder: Path) -> TokenizedCorpus:
    """A shard folder another pipeline wrote, checked against ``cfg.tokenizer`` (identity and vocabulary).

    Without ``val_bytes.bin``, the bytes of each validation id come from the tokenizer's table of
    token lengths (exact for byte-level vocabularies).
    """
    meta = shards.read_meta(folder)
    tokenizer = load_tokenizer(cfg.tokenizer, list, folder)
    if meta["tokenizer"] != tokenizer.identity:
        raise shards.ShardError(
            f"--data: the shards in {folder} were tokenised with {meta['tokenizer']}, "
            f"but --tokenizer is {cfg.tokenizer} ({tokenizer.identity})"
        )
    if meta["vocab_size"] != tokenizer.vocab_size:
        raise shards.ShardError(
            f"--data: {folder / shards.META} says vocab_size {meta['vocab_size']}, "
            f"the tokenizer has {tokenizer.vocab_size}"
        )
    if meta.get("separator") is None:
        meta["separator"] = tokenizer.separator
    identity = json.dumps(meta, sort_keys=True).encode("utf-8")
    meta.setdefault("fingerprint", "shards-" + hashlib.blake2b(identity, digest_size=12).hexdigest())
    meta.setdefault("name", f"shards:{folder}")
    meta["tokenizer_spec"] = cfg.tokenizer
    corpus = _open_corpus(folder, meta)
    if corpus.val_bytes is None:
        corpus.val_bytes = torch.from_numpy(tokenizer.token_bytes()[corpus.val.numpy().astype(np.int64)])
    return corpus


def check_shard_source(cfg: DataConfig) -> None:
    """When ``cfg.source`` is a shard folder: load it and check every id is below its vocabulary
    (one pass over the files; ShardError in one line otherwise)."""
    source = resolve_source(cfg)
    if not isinstance(source, ShardFolder):
        return
    path = source.path
    corpus = _shard_source(cfg, path)
    for split, stream in (("train", corpus.train), ("val", corpus.val)):
        top = shards.max_id(stream)
        if top >= corpus.vocab_size:
            raise shards.ShardError(
                f"--data: {path / (split + '.bin')} holds id {top}, beyond vocab_size {corpus.vocab_size}"
            )
