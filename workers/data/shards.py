"""Memory-mapped token shards: the on-disk form of a tokenised corpus.

A shard folder holds one flat file per split, the nanoGPT / litgpt convention, plus metadata:

    meta.json       {"format": "resnas-tokens/1", "dtype": "uint16", "vocab_size": V,
                     "tokenizer": IDENTITY, "separator": ID,
                     "n_train_tokens": N, "n_val_tokens": M}   (other keys are kept, unread)
    train.bin       N token ids, little-endian `dtype` (uint8, uint16 or uint32), no header
    val.bin         M token ids
    val_bytes.bin   optional: M uint16, the UTF-8 bytes of text each validation id covers
    tokenizer.json  optional: the Hugging Face tokenizer that wrote the ids

``IDENTITY`` is ``"bytes"`` or ``"sha256:"`` + the sha256 of ``tokenizers.Tokenizer.to_str()``
(`workers.data.tokenizer`).  The corpus cache writes exactly this layout, and ``nas search --data FOLDER``
reads a folder another pipeline wrote.  ``meta.json`` is written last: its presence marks a
complete folder.  Readers map the files copy-on-write (``np.memmap(mode="c")``): nothing is read
until used, and the processes of one machine share the page cache.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

FORMAT = "resnas-tokens/1"
META = "meta.json"
SPLITS = ("train", "val")
VAL_BYTES = "val_bytes.bin"
DTYPES = ("uint8", "uint16", "uint32")


class ShardError(ValueError):
    """A shard folder that cannot be used; the message is one line naming --data."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


def is_shard_folder(path: Path) -> bool:
    """True when ``path`` is a folder holding a ``meta.json`` of this format."""
    try:
        return path.is_dir() and json.loads((path / META).read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def write_stream(path: Path, chunks: Iterable[np.ndarray], dtype: np.dtype) -> int:
    """Write the id chunks to ``path`` as one flat ``dtype`` file (atomically); returns the count."""
    limit = np.iinfo(dtype).max
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    count = 0
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                if chunk.size and (chunk.min() < 0 or chunk.max() > limit):
                    raise ShardError(f"--data: id {int(chunk.max())} does not fit in {np.dtype(dtype).name}")
                f.write(np.ascontiguousarray(chunk, dtype=np.dtype(dtype).newbyteorder("<")).tobytes())
                count += int(chunk.size)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


def write_meta(folder: Path, meta: dict[str, Any]) -> None:
    """Write ``meta.json`` (atomically, last: it marks the folder complete)."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".meta.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps({"format": FORMAT, **meta}, indent=1).encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, folder / META)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_meta(folder: Path) -> dict[str, Any]:
    """The checked metadata of a shard folder: format, dtype, vocabulary, and file sizes that agree.

    ShardError (one line) when a key is missing or wrong, a file is missing, or a file's size is not
    its token count times the dtype's width.
    """
    try:
        meta = json.loads((folder / META).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ShardError(f"--data: {folder / META} is not readable JSON ({err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ShardError(f"--data: {folder / META} is not a token-shard folder (format must be {FORMAT!r})")
    for key, kind in (("vocab_size", int), ("n_train_tokens", int), ("n_val_tokens", int), ("tokenizer", str)):
        if not isinstance(meta.get(key), kind) or isinstance(meta.get(key), bool):
            raise ShardError(f"--data: {folder / META}: {key} must be {'an integer' if kind is int else 'a string'}")
    if meta.get("dtype") not in DTYPES:
        raise ShardError(
            f"--data: {folder / META}: dtype must be one of {', '.join(DTYPES)}, got {meta.get('dtype')!r}"
        )
    dtype = np.dtype(meta["dtype"])
    if meta["vocab_size"] < 2 or meta["vocab_size"] > 2 ** (8 * dtype.itemsize):
        raise ShardError(
            f"--data: {folder / META}: a vocabulary of {meta['vocab_size']} tokens needs "
            f"{'uint32' if meta['vocab_size'] > 65_536 else 'a wider dtype'}, not {dtype.name}"
        )
    separator = meta.setdefault("separator", None)
    if separator is not None and not (isinstance(separator, int) and 0 <= separator < meta["vocab_size"]):
        raise ShardError(f"--data: {folder / META}: separator must be an id below vocab_size, got {separator!r}")
    if meta["n_val_tokens"] < 2:
        raise ShardError(f"--data: {folder / META}: n_val_tokens must be >= 2, got {meta['n_val_tokens']}")
    for split in SPLITS:
        _check_size(folder / f"{split}.bin", meta[f"n_{split}_tokens"], dtype.itemsize)
    if (folder / VAL_BYTES).exists():
        _check_size(folder / VAL_BYTES, meta["n_val_tokens"], 2)
    return meta


def _check_size(path: Path, n_tokens: int, itemsize: int) -> None:
    try:
        size = path.stat().st_size
    except OSError:
        raise ShardError(f"--data: {path} is missing") from None
    if size != n_tokens * itemsize:
        raise ShardError(
            f"--data: {path} holds {size} bytes, but meta.json says {n_tokens} tokens of {itemsize} bytes "
            f"({n_tokens * itemsize} bytes)"
        )


def open_stream(path: Path, dtype: str | type | np.dtype, n_tokens: int) -> torch.Tensor:
    """A 1-D tensor over the file, memory-mapped copy-on-write (no read until used, shared page cache)."""
    little = np.dtype(dtype).newbyteorder("<")
    if n_tokens == 0:
        return torch.from_numpy(np.zeros(0, dtype=np.dtype(dtype)))
    array = np.memmap(path, dtype=little, mode="c", shape=(n_tokens,))
    return torch.from_numpy(array if little.isnative else array.astype(little.newbyteorder("=")))


def max_id(stream: torch.Tensor, chunk: int = 1 << 24) -> int:
    """The largest id in a stream, read in chunks (one pass over the file)."""
    return max((int(stream[i : i + chunk].max()) for i in range(0, stream.numel(), chunk)), default=-1)
