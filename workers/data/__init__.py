"""The data pipeline: where documents come from (`documents`; the shipped corpus is in `shipped/`), what a
corpus is (`config.DataConfig`), tokenizers (`tokenizer`), memory-mapped token shards (`shards`), the corpus
cache (`corpus.load_corpus`) and the batches a run reads (`batches`)."""

from .batches import TrainBatches, validation_batches
from .config import DataConfig
from .corpus import TokenizedCorpus, load_corpus
from .documents import byte_tokens, read_shipped_texts, shipped_corpus_path

__all__ = [
    "DataConfig",
    "TokenizedCorpus",
    "TrainBatches",
    "byte_tokens",
    "load_corpus",
    "read_shipped_texts",
    "shipped_corpus_path",
    "validation_batches",
]
