"""One proxy trial: data, training loop, evaluation."""

from .data import byte_tokens, read_shipped_texts, shipped_corpus_path

__all__ = ["byte_tokens", "read_shipped_texts", "shipped_corpus_path"]
