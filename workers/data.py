"""Text the proxy runs train on. For now: the shipped default corpus (see corpus/NOTICE)."""

from __future__ import annotations

import gzip
import json
from importlib import resources
from pathlib import Path

import torch


def shipped_corpus_path() -> Path:
    """The default corpus: Shakespeare's works, one JSON record {"title", "text"} per work."""
    return Path(str(resources.files("workers") / "corpus" / "shakespeare.jsonl.gz"))


def read_shipped_texts() -> list[str]:
    """Every work of the shipped corpus, as text, in a fixed order."""
    with gzip.open(shipped_corpus_path(), "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def byte_tokens(texts: list[str]) -> torch.Tensor:
    """UTF-8 bytes of the texts, joined by newlines, as a 1-D long tensor (vocabulary 256)."""
    data = "\n".join(texts).encode("utf-8")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
