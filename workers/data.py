"""Text the proxy trials train on: loading, tokenisation, splits, memory-mapped token shards, batches.

Every text source goes through Hugging Face ``datasets``:

* ``"shipped"``: the default corpus ``corpus/shakespeare.jsonl.gz`` (see corpus/NOTICE),
  42 works, one JSON record ``{"title", "text"}`` each;
* a local ``.txt`` / ``.jsonl`` / ``.json`` / ``.parquet`` file (``.txt``, ``.json`` and
  ``.jsonl`` may be gzipped), or a directory of them (searched recursively); one ``.txt``
  FILE is one document, one JSON record / parquet row is one document;
* any other string: a Hugging Face hub dataset, ``datasets.load_dataset(name, split=...)``.

A source may also be a folder of token shards another pipeline wrote (`workers.shards`).

The tokeniser is ``DataConfig.tokenizer`` (`workers.tokenizer`: bytes, train:V, a file or a hub
name).  NUL bytes are removed from documents (NUL is the byte tokeniser's separator); documents
are joined by the tokeniser's separator.  Splits are by document: a document goes to validation
iff a salted blake2b hash of its bytes falls below ``val_fraction``.

Each (source, tokeniser, split) is tokenised once into memory-mapped shards under ``cache_dir``
(`workers.shards`), keyed by a fingerprint of the source, the tokeniser's identity and the split;
trial processes map them read-only, so the processes of one machine share the page cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pydantic
import torch

from . import shards
from .tokenizer import BYTES, ByteTokenizer, HFTokenizer, load_tokenizer, normalised_spec, token_dtype

logger = logging.getLogger(__name__)

VOCAB_SIZE = 256  # of the byte tokeniser
SEPARATOR = 0
CACHE_FORMAT = 2
SHIPPED = "shipped"

# file suffix (after stripping .gz for text formats) -> datasets packaged builder
_BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


# --------------------------------------------------------------------------- config


class DataConfig(pydantic.BaseModel):
    """Where the text comes from and how it is split; immutable, unknown keys rejected.

    ``source``: ``"shipped"``, a local file / directory path, or a hub dataset name (only
    then is the hub contacted).  ``hub_split``: the split loaded from the hub.
    ``text_field``: the column holding the text (json, parquet, hub; ``.txt`` files are
    read whole).  ``val_fraction``: in (0, 0.5], the share of documents (by hash) held out.
    ``split_seed``: salts the split hash.  ``tokenizer``: a `workers.tokenizer` spec (bytes,
    train:V, a tokenizer.json or a folder holding one, a hub name).  ``cache_dir``: where token
    shards, trained tokenizers and the ``datasets`` cache for local files go (default
    ``$RESNAS_CACHE`` or ``~/.cache/resnas``).
    """

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    source: str = pydantic.Field(SHIPPED, min_length=1)
    hub_split: str = pydantic.Field("train", min_length=1)
    text_field: str = pydantic.Field("text", min_length=1)
    val_fraction: float = pydantic.Field(0.05, gt=0.0, le=0.5)
    split_seed: int = 0
    tokenizer: str = BYTES
    cache_dir: str | None = None

    @pydantic.field_validator("tokenizer")
    @classmethod
    def _known_tokenizer(cls, spec: str) -> str:
        return normalised_spec(spec)

    def resolved_cache_dir(self) -> Path:
        """The cache directory this config uses (not created here)."""
        if self.cache_dir is not None:
            return Path(self.cache_dir).expanduser()
        env = os.environ.get("RESNAS_CACHE")
        return Path(env).expanduser() if env else Path.home() / ".cache" / "resnas"


@dataclass
class TokenizedCorpus:
    """Tokenised train and validation streams: 1-D tensors over memory-mapped shards (uint8 for
    bytes, else uint16 or uint32), documents joined by the tokeniser's ``separator``.

    ``val_bytes[i]``: UTF-8 bytes of text validation token i covers (`workers.tokenizer`), so the
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


# --------------------------------------------------------------------------- sources


def shipped_corpus_path() -> Path:
    """The default corpus: Shakespeare's works, one JSON record {"title", "text"} per work."""
    return Path(str(resources.files("workers") / "corpus" / "shakespeare.jsonl.gz"))


def _looks_like_path(source: str) -> bool:
    """True when ``source`` is clearly meant as a local path rather than a hub name."""
    return source.startswith(("/", ".", "~")) or _builder_for(Path(source)) is not None


def _builder_for(path: Path) -> str | None:
    """The ``datasets`` builder for a file name, or None if the suffix is not supported."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
        if suffixes and suffixes[-1] == ".parquet":
            return None
    return _BUILDERS.get(suffixes[-1]) if suffixes else None


def _local_path(cfg: DataConfig) -> Path | None:
    """The local file or directory named by the config, or None for a hub dataset."""
    if cfg.source == SHIPPED:
        return shipped_corpus_path()
    path = Path(cfg.source).expanduser()
    if path.exists():
        return path.resolve()
    if _looks_like_path(cfg.source):
        raise FileNotFoundError(f"data source {cfg.source!r}: no such file or directory")
    return None


def _data_files(path: Path) -> list[Path]:
    """The supported data files at ``path`` (itself, or those under a directory, sorted)."""
    if path.is_file():
        if _builder_for(path) is None:
            raise ValueError(f"data source {str(path)!r}: unsupported file type (use {sorted(_BUILDERS)})")
        return [path]
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file()
        and _builder_for(p) is not None
        and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )
    if not files:
        raise ValueError(f"data source {str(path)!r}: no {sorted(_BUILDERS)} files in the directory")
    return files


def _source_identity(cfg: DataConfig) -> dict[str, Any]:
    """What identifies the source's content for the cache key (cheap: no text is read).

    Shipped: sha256 of the file.  Local files: absolute path, size and mtime of each.
    Hub: name and split (a hub dataset that changes upstream needs its cache cleared).
    """
    if cfg.source == SHIPPED:
        digest = hashlib.sha256(shipped_corpus_path().read_bytes()).hexdigest()
        return {"kind": SHIPPED, "sha256": digest}
    path = _local_path(cfg)
    if path is None:
        return {"kind": "hub", "name": cfg.source, "split": cfg.hub_split}
    if shards.is_shard_folder(path):
        return {"kind": "shards", "meta": (path / shards.META).read_text(encoding="utf-8")}
    files = []
    for f in _data_files(path):
        st = f.stat()
        files.append([str(f), st.st_size, st.st_mtime_ns])
    return {"kind": "local", "files": files}


def _corpus_name(cfg: DataConfig) -> str:
    """A short human-readable name for the source."""
    if cfg.source == SHIPPED:
        return "shipped:shakespeare"
    path = _local_path(cfg)
    return f"local:{path}" if path is not None else f"hub:{cfg.source}[{cfg.hub_split}]"


# --------------------------------------------------------------------------- reading


def _column(ds: Any, field: str, source: str) -> list[Any]:
    """Column ``field`` of a ``datasets.Dataset``; ValueError naming field and source if absent."""
    if field not in ds.column_names:
        raise ValueError(f"data source {source!r} has no text field {field!r} (fields: {', '.join(ds.column_names)})")
    return ds[field]


def _load_local_group(builder: str, files: list[Path], cfg: DataConfig) -> list[Any]:
    """The documents of local files of one format, read through ``datasets`` (without its progress bars:
    reading a local file takes a moment, and a bar on stderr would break the CLI's one-line errors)."""
    import datasets

    kwargs: dict[str, Any] = {"sample_by": "document"} if builder == "text" else {}
    bars = not datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        ds = datasets.load_dataset(
            builder,
            data_files=[str(f) for f in files],
            split="train",
            cache_dir=str(cfg.resolved_cache_dir() / "hf-datasets"),
            **kwargs,
        )
    finally:
        if bars:
            datasets.enable_progress_bars()
    field = "text" if builder == "text" else cfg.text_field  # .txt files: the whole file
    return list(_column(ds, field, cfg.source))


def _raw_documents(cfg: DataConfig) -> list[Any]:
    """Every record's text field, in source order, read through ``datasets`` (may contain None)."""
    path = _local_path(cfg)
    if path is None:
        import datasets

        logger.info("loading hub dataset %s (split %s)", cfg.source, cfg.hub_split)
        ds = datasets.load_dataset(cfg.source, split=cfg.hub_split)
        return list(_column(ds, cfg.text_field, cfg.source))
    groups: dict[str, list[Path]] = {}
    for f in _data_files(path):
        groups.setdefault(_builder_for(f) or "", []).append(f)
    docs: list[Any] = []
    for builder in sorted(groups):
        docs.extend(_load_local_group(builder, groups[builder], cfg))
    return docs


def read_documents(cfg: DataConfig) -> list[str]:
    """The non-empty documents of the source, in source order, NUL bytes removed.

    Raises ValueError (naming the source) when a text is not a string or nothing is left.
    """
    docs: list[str] = []
    n_nul = 0
    for doc in _raw_documents(cfg):
        if doc is None:
            continue
        if not isinstance(doc, str):
            raise ValueError(
                f"data source {cfg.source!r}: field {cfg.text_field!r} holds {type(doc).__name__}, not text"
            )
        if "\x00" in doc:
            n_nul += 1
            doc = doc.replace("\x00", "")
        if doc:
            docs.append(doc)
    if n_nul:
        logger.warning("data source %r: removed NUL bytes from %d documents", cfg.source, n_nul)
    if not docs:
        raise ValueError(f"data source {cfg.source!r} is empty: no non-empty text in field {cfg.text_field!r}")
    return docs


def read_shipped_texts() -> list[str]:
    """Every work of the shipped corpus, as text, in a fixed (file) order."""
    return read_documents(DataConfig())


# --------------------------------------------------------------------------- byte streams


def encode_documents(texts: Sequence[str]) -> np.ndarray:
    """UTF-8 bytes of the texts joined by SEPARATOR (between documents), as a 1-D uint8 array."""
    return ByteTokenizer().encode(texts)[0].astype(np.uint8)


def byte_tokens(texts: list[str]) -> torch.Tensor:
    """UTF-8 bytes of the texts joined by SEPARATOR, as a 1-D long tensor (vocabulary 256)."""
    return torch.from_numpy(encode_documents(texts)).long()


def decode_tokens(tokens: torch.Tensor | np.ndarray) -> list[str]:
    """Inverse of the byte tokeniser: the documents of a stream (split at SEPARATOR)."""
    return ByteTokenizer().decode(np.asarray(tokens))


# --------------------------------------------------------------------------- splits


def _doc_hash(data: bytes, seed: int) -> float:
    """A stable value in [0, 1) for a document: blake2b of its bytes, salted with ``seed``."""
    salt = seed.to_bytes(16, "little", signed=True)
    digest = hashlib.blake2b(salt + data, digest_size=8, person=b"resnas-split").digest()
    return int.from_bytes(digest, "big") / 2.0**64


def split_documents(texts: Sequence[str], val_fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """(train, val) documents, each in source order; a document is never cut.

    A document goes to validation iff its hash is below ``val_fraction`` (identical documents
    therefore land in the same split).  With >= 2 documents both splits are non-empty: if
    the rule leaves validation (train) empty, the document with the smallest (largest)
    hash is moved there.  A single document goes to train (validation is then empty).
    """
    hashes = [_doc_hash(t.encode("utf-8"), seed) for t in texts]
    is_val = [h < val_fraction and len(texts) >= 2 for h in hashes]
    if len(texts) >= 2 and not any(is_val):
        is_val[min(range(len(texts)), key=hashes.__getitem__)] = True
    if len(texts) >= 2 and all(is_val):
        is_val[max(range(len(texts)), key=hashes.__getitem__)] = False
    train = [t for t, v in zip(texts, is_val, strict=True) if not v]
    val = [t for t, v in zip(texts, is_val, strict=True) if v]
    return train, val


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


def corpus_fingerprint(cfg: DataConfig) -> str:
    """Cache key: hash of the source identity, the tokeniser and the split parameters."""
    key = {
        "format": CACHE_FORMAT,
        "source": _source_identity(cfg),
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


def _encoded_chunks(tokenizer, docs: Sequence[str], label: str, per_chunk: int = 256):
    """(ids, bytes per id) of consecutive groups of documents, the groups joined by the separator;
    a progress bar on large corpora (over 64 MB of text)."""
    n_chars = sum(len(d) for d in docs)
    show = n_chars > 64 << 20
    progress = None
    if show:
        from rich.progress import Progress

        progress = Progress(transient=True)
        progress.start()
        task = progress.add_task(f"tokenising {label}", total=n_chars)
    try:
        for start in range(0, len(docs), per_chunk):
            group = docs[start : start + per_chunk]
            ids, counts = tokenizer.encode(group)
            if start:
                ids = np.concatenate([[tokenizer.separator], ids])
                counts = np.concatenate([np.ones(1, dtype=np.uint16), counts])
            yield ids, counts
            if progress is not None:
                progress.advance(task, sum(len(d) for d in group))
    finally:
        if progress is not None:
            progress.stop()


def _write_split(entry: Path, split: str, tokenizer, docs: Sequence[str], dtype: np.dtype) -> tuple[int, int]:
    """Tokenise one split into ``<split>.bin`` (and ``val_bytes.bin``): (tokens, bytes of text)."""
    n_bytes = 0
    byte_chunks: list[np.ndarray] = []

    def ids():
        nonlocal n_bytes
        for chunk_ids, counts in _encoded_chunks(tokenizer, docs, split):
            n_bytes += int(counts.sum(dtype=np.int64))
            if split == "val":
                byte_chunks.append(counts)
            yield chunk_ids

    n_tokens = shards.write_stream(entry / f"{split}.bin", ids(), dtype)
    if split == "val":
        shards.write_stream(entry / shards.VAL_BYTES, byte_chunks, np.dtype(np.uint16))
    return n_tokens, n_bytes


def _build_corpus(cfg: DataConfig, fingerprint: str, entry: Path) -> dict[str, Any]:
    """Read, split and tokenise the source into the shard folder ``entry``; returns its metadata."""
    docs = read_documents(cfg)
    train_docs, val_docs = split_documents(docs, cfg.val_fraction, cfg.split_seed)
    entry.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer(cfg.tokenizer, lambda: train_docs, entry)
    if isinstance(tokenizer, HFTokenizer):
        (entry / "tokenizer.json").write_text(tokenizer.to_str(), encoding="utf-8")
    dtype = token_dtype(tokenizer.vocab_size)
    n_train, train_bytes = _write_split(entry, "train", tokenizer, train_docs, dtype)
    n_val, val_bytes = _write_split(entry, "val", tokenizer, val_docs, dtype)
    meta = {
        "dtype": dtype.name,
        "vocab_size": tokenizer.vocab_size,
        "tokenizer": tokenizer.identity,
        "tokenizer_spec": cfg.tokenizer,
        "separator": tokenizer.separator,
        "n_train_tokens": n_train,
        "n_val_tokens": n_val,
        "n_train_bytes": train_bytes,
        "n_val_bytes": val_bytes,
        "fingerprint": fingerprint,
        "name": _corpus_name(cfg),
        "config": cfg.model_dump(),
        "n_train_docs": len(train_docs),
        "n_val_docs": len(val_docs),
    }
    shards.write_meta(entry, meta)
    return meta


def load_corpus(cfg: DataConfig) -> TokenizedCorpus:
    """The tokenised train / validation streams of ``cfg``'s source, from cache when possible.

    A cache hit does not touch ``datasets`` or the tokenizer.  Parallel callers may both build on a
    miss; every file is written atomically and ``meta.json`` last, so no one reads a half-written entry.
    A shard folder given as the source is mapped as it is (`check_shard_source` checks it whole).
    """
    path = _local_path(cfg)
    if path is not None and shards.is_shard_folder(path):
        return _shard_source(cfg, path)
    fingerprint = corpus_fingerprint(cfg)
    entry = cfg.resolved_cache_dir() / "corpora" / fingerprint
    cached = _read_cache(entry)
    if cached is not None:
        logger.debug("corpus %s: cache hit %s", cached.name, entry)
        return cached
    meta = _build_corpus(cfg, fingerprint, entry)
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
    return _open_corpus(entry, meta)


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
    path = _local_path(cfg)
    if path is None or not shards.is_shard_folder(path):
        return
    corpus = _shard_source(cfg, path)
    for split, stream in (("train", corpus.train), ("val", corpus.val)):
        top = shards.max_id(stream)
        if top >= corpus.vocab_size:
            raise shards.ShardError(
                f"--data: {path / (split + '.bin')} holds id {top}, beyond vocab_size {corpus.vocab_size}"
            )


# --------------------------------------------------------------------------- batches


def _windows(tokens: torch.Tensor, seq_len: int) -> torch.Tensor:
    """View of the non-overlapping (seq_len + 1)-token windows of a 1-D stream, starting seq_len apart."""
    if tokens.dim() != 1:
        raise ValueError(f"expected a 1-D token stream, got shape {tuple(tokens.shape)}")
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    if tokens.numel() < seq_len + 1:
        return tokens.new_empty((0, seq_len + 1))
    return tokens.unfold(0, seq_len + 1, seq_len)


def _split_window_batch(windows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) int64 tensors: each window without its last / first token."""
    w = windows.long()
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


class TrainBatches:
    """Endless, resumable stream of shuffled training batches ``(x, y)``, shape (batch_size, seq_len).

    The stream is packed into ``(len - 1) // seq_len`` windows of seq_len + 1 tokens starting
    seq_len apart, so each token (but the first) is a target exactly once per epoch.  Epoch
    e visits the windows in the order ``randperm`` of a generator seeded from (seed, e);
    batches take consecutive windows of that endless visiting order (a batch may straddle
    two epochs when the window count is not a multiple of batch_size).  ``state_dict()``
    is (epoch, position) of the next window, so a resumed run yields the same batches.
    """

    def __init__(self, tokens: torch.Tensor, seq_len: int, batch_size: int, seed: int = 0) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.windows = _windows(tokens, seq_len)
        self.n_windows = int(self.windows.shape[0])
        if self.n_windows < batch_size:
            raise ValueError(
                f"train stream of {tokens.numel()} tokens holds {self.n_windows} windows of "
                f"seq_len + 1 = {seq_len + 1} tokens, fewer than batch_size = {batch_size}"
            )
        self.seq_len, self.batch_size, self.seed = seq_len, batch_size, seed
        self.epoch, self.position = 0, 0
        self._order_epoch, self._order = -1, torch.empty(0, dtype=torch.long)

    def epoch_order(self, epoch: int) -> torch.Tensor:
        """The window indices in the order epoch ``epoch`` visits them (a permutation)."""
        if epoch != self._order_epoch:
            blob = f"{self.seed}/{epoch}".encode()
            seed = int.from_bytes(hashlib.blake2b(blob, digest_size=8).digest(), "big") >> 1
            gen = torch.Generator().manual_seed(seed)
            self._order, self._order_epoch = torch.randperm(self.n_windows, generator=gen), epoch
        return self._order

    def _take(self, n: int) -> torch.Tensor:
        """The next ``n`` window indices, advancing (epoch, position)."""
        parts = []
        while n > 0:
            k = min(n, self.n_windows - self.position)
            parts.append(self.epoch_order(self.epoch)[self.position : self.position + k])
            self.position += k
            n -= k
            if self.position == self.n_windows:
                self.epoch, self.position = self.epoch + 1, 0
        return torch.cat(parts)

    def __iter__(self) -> TrainBatches:
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        return _split_window_batch(self.windows[self._take(self.batch_size)])

    def state_dict(self) -> dict[str, int]:
        """Position of the stream (plus the settings it is only valid for)."""
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "seq_len": self.seq_len,
            "batch_size": self.batch_size,
            "n_windows": self.n_windows,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume at ``state`` (from ``state_dict``); ValueError if it was made for other settings."""
        for key in ("seed", "seq_len", "batch_size", "n_windows"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(f"TrainBatches state has {key}={state[key]}, this stream has {getattr(self, key)}")
        if not 0 <= state["position"] < self.n_windows or state["epoch"] < 0:
            raise ValueError(f"TrainBatches state out of range: {state}")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


def _validation_starts(n_tokens: int, seq_len: int, n_sequences: int) -> torch.Tensor:
    """Start offsets of the held-out windows (see `validation_batches`)."""
    if n_sequences < 1:
        raise ValueError(f"n_sequences must be >= 1, got {n_sequences}")
    total = max((n_tokens - 1) // seq_len, 0)
    if total > n_sequences:
        return torch.arange(n_sequences) * (total - 1) // max(n_sequences - 1, 1) * seq_len
    return torch.arange(total) * seq_len


def validation_batches(
    tokens: torch.Tensor, seq_len: int, n_sequences: int, batch_size: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A fixed held-out set: ``n_sequences`` windows spread evenly over the validation stream.

    Windows are non-overlapping (seq_len + 1 tokens, seq_len apart, as in TrainBatches); window
    k = 0..n-1 is the floor(k (W - 1) / (n - 1))-th of the stream's W, so the set samples every
    part of the held-out text (the first n windows would be one or two documents: on the
    shipped corpus their loss sits 0.07 nats above the whole set's, and two seeds' gap on them
    was 0.01-0.015 nats off their gap on the whole set).  All W are used when the stream is
    short.  Batches of ``batch_size`` (the last may be smaller), ``(x, y)`` int64, in stream
    order.  ValueError if not even one window fits.
    """
    if batch_size < 1:
        raise ValueError(f"n_sequences and batch_size must be >= 1, got {n_sequences}, {batch_size}")
    windows = _windows(tokens, seq_len)
    windows = windows[_validation_starts(tokens.numel(), seq_len, n_sequences) // seq_len]
    if windows.shape[0] == 0:
        raise ValueError(
            f"validation stream of {tokens.numel()} tokens is shorter than one window "
            f"of seq_len + 1 = {seq_len + 1} tokens"
        )
    if windows.shape[0] < n_sequences:
        logger.warning("validation stream holds only %d of %d requested sequences", windows.shape[0], n_sequences)
    return [_split_window_batch(windows[i : i + batch_size]) for i in range(0, windows.shape[0], batch_size)]


def validation_tokens_per_byte(corpus: TokenizedCorpus, seq_len: int, n_sequences: int) -> float:
    """Target tokens per byte of text in the held-out set of `validation_batches`: exact, from the
    bytes each target token covers (1.0 for the byte tokeniser)."""
    starts = _validation_starts(corpus.val.numel(), seq_len, n_sequences)
    if corpus.val_bytes is None or starts.numel() == 0:
        return 1.0
    n_bytes = sum(int(corpus.val_bytes[s + 1 : s + seq_len + 1].sum(dtype=torch.int64)) for s in starts.tolist())
    return starts.numel() * seq_len / n_bytes


def bits_per_byte(nats_per_token: float, tokens_per_byte: float = 1.0) -> float:
    """Bits per byte from a mean cross-entropy in nats per token: nats/token x tokens/byte / ln 2."""
    return nats_per_token * tokens_per_byte / math.log(2)
