"""Where a corpus's documents come from, and how they are split: the shipped corpus, local files and
folders, hub datasets (all through Hugging Face ``datasets``), their identity for the cache, byte streams,
and the split by document.

`resolve_source(cfg)` decides once what ``DataConfig.source`` names, as a typed `Source`: a `ShardFolder`,
`LocalFiles` (the shipped corpus is one) or a `HubDataset`; each knows its name and its identity for the
cache, and `read_documents(source, text_field, cache_dir)` reads a `LocalFiles` or a `HubDataset`.

Sources (``DataConfig.source``, `workers.data.corpus`):

* ``"shipped"``: the default corpus ``shipped/shakespeare.jsonl.gz`` (see shipped/NOTICE),
  42 works, one JSON record ``{"title", "text"}`` each;
* a local ``.txt`` / ``.jsonl`` / ``.json`` / ``.parquet`` file (``.txt``, ``.json`` and
  ``.jsonl`` may be gzipped), or a directory of them (searched recursively); one ``.txt``
  FILE is one document, one JSON record / parquet row is one document;
* any other string: a Hugging Face hub dataset, ``datasets.load_dataset(name, split=...)``;
* a folder of token shards another pipeline wrote (`workers.data.shards`): read by `workers.data.corpus` directly.

NUL bytes are removed from documents (NUL is the byte tokeniser's separator). Splits are by document: a
document goes to validation iff a salted blake2b hash of its bytes falls below ``val_fraction``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import shards
from .config import SHIPPED, DataConfig
from .tokenizer import ByteTokenizer

logger = logging.getLogger(__name__)

# file suffix (after stripping .gz for text formats) -> datasets packaged builder
_BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


# --------------------------------------------------------------------------- sources


def shipped_corpus_path() -> Path:
    """The default corpus: Shakespeare's works, one JSON record {"title", "text"} per work."""
    return Path(str(resources.files("workers.data") / "shipped" / "shakespeare.jsonl.gz"))


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


@dataclass(frozen=True)
class ShardFolder:
    """A folder of token shards another pipeline wrote (`workers.data.shards`), used as it is."""

    path: Path

    @property
    def name(self) -> str:
        return f"shards:{self.path}"


@dataclass(frozen=True)
class LocalFiles:
    """Local data files (sorted), read through ``datasets``; the shipped corpus is one, named apart."""

    path: Path
    files: tuple[Path, ...]
    name: str

    def identity(self) -> dict[str, Any]:
        """Shipped: the sha256 of its file. Otherwise the absolute path, size and mtime of each file."""
        if self.name == SHIPPED_NAME:
            return {"kind": SHIPPED, "sha256": hashlib.sha256(self.path.read_bytes()).hexdigest()}
        return {"kind": "local", "files": [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in self.files]}


@dataclass(frozen=True)
class HubDataset:
    """A Hugging Face hub dataset, loaded by name and split (a dataset that changes upstream needs its cache
    cleared: its identity is its name and split)."""

    dataset: str
    split: str

    @property
    def name(self) -> str:
        return f"hub:{self.dataset}[{self.split}]"

    def identity(self) -> dict[str, Any]:
        return {"kind": "hub", "name": self.dataset, "split": self.split}


Source = ShardFolder | LocalFiles | HubDataset
SHIPPED_NAME = "shipped:shakespeare"


def resolve_source(cfg: DataConfig) -> Source:
    """What ``cfg.source`` names, decided once (cheap: no text is read). FileNotFoundError for a path that
    names nothing, ValueError for files of no supported type."""
    if cfg.source == SHIPPED:
        path = shipped_corpus_path()
        return LocalFiles(path, (path,), SHIPPED_NAME)
    path = Path(cfg.source).expanduser()
    if not path.exists():
        if _looks_like_path(cfg.source):
            raise FileNotFoundError(f"data source {cfg.source!r}: no such file or directory")
        return HubDataset(cfg.source, cfg.hub_split)
    path = path.resolve()
    if shards.is_shard_folder(path):
        return ShardFolder(path)
    return LocalFiles(path, tuple(_data_files(path)), f"local:{path}")


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


# --------------------------------------------------------------------------- reading


def _column(ds: Any, field: str, source: str) -> list[Any]:
    """Column ``field`` of a ``datasets.Dataset``; ValueError naming field and source if absent."""
    if field not in ds.column_names:
        raise ValueError(f"data source {source!r} has no text field {field!r} (fields: {', '.join(ds.column_names)})")
    return ds[field]


def _load_local_group(builder: str, files: list[Path], text_field: str, cache_dir: Path, label: str) -> list[Any]:
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
            cache_dir=str(cache_dir / "hf-datasets"),
            **kwargs,
        )
    finally:
        if bars:
            datasets.enable_progress_bars()
    field = "text" if builder == "text" else text_field  # .txt files: the whole file
    return list(_column(ds, field, label))


def _raw_documents(source: LocalFiles | HubDataset, text_field: str, cache_dir: Path) -> list[Any]:
    """Every record's text field, in source order, read through ``datasets`` (may contain None)."""
    if isinstance(source, HubDataset):
        import datasets

        logger.info("loading hub dataset %s (split %s)", source.dataset, source.split)
        ds = datasets.load_dataset(source.dataset, split=source.split)
        return list(_column(ds, text_field, source.dataset))
    groups: dict[str, list[Path]] = {}
    for f in source.files:
        groups.setdefault(_builder_for(f) or "", []).append(f)
    docs: list[Any] = []
    for builder in sorted(groups):
        docs.extend(_load_local_group(builder, groups[builder], text_field, cache_dir, str(source.path)))
    return docs


def read_documents(source: LocalFiles | HubDataset, text_field: str, cache_dir: Path) -> list[str]:
    """The non-empty documents of the source, in source order, NUL bytes removed (``datasets`` caches local
    files under ``cache_dir``).

    Raises ValueError (naming the source) when a text is not a string or nothing is left.
    """
    label = source.dataset if isinstance(source, HubDataset) else str(source.path)
    docs: list[str] = []
    n_nul = 0
    for doc in _raw_documents(source, text_field, cache_dir):
        if doc is None:
            continue
        if not isinstance(doc, str):
            raise ValueError(f"data source {label!r}: field {text_field!r} holds {type(doc).__name__}, not text")
        if "\x00" in doc:
            n_nul += 1
            doc = doc.replace("\x00", "")
        if doc:
            docs.append(doc)
    if n_nul:
        logger.warning("data source %r: removed NUL bytes from %d documents", label, n_nul)
    if not docs:
        raise ValueError(f"data source {label!r} is empty: no non-empty text in field {text_field!r}")
    return docs


def read_shipped_texts() -> list[str]:
    """Every work of the shipped corpus, as text, in a fixed (file) order."""
    cfg = DataConfig()
    source = resolve_source(cfg)
    assert isinstance(source, LocalFiles)
    return read_documents(source, cfg.text_field, cfg.resolved_cache_dir())


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
