"""The data pipeline: where documents come from (`documents`; the shipped corpus is in `shipped/`), what a
corpus is (`config.DataConfig`), tokenizers (`tokenizer`), memory-mapped token shards (`shards`), the corpus
cache (`corpus.load_corpus`) and the batches a run reads (`batches`)."""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
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

__getattr__ = lazy_exports(
    __name__,
    {
        "TrainBatches": ".batches",
        "validation_batches": ".batches",
        "DataConfig": ".config",
        "TokenizedCorpus": ".corpus",
        "load_corpus": ".corpus",
        "byte_tokens": ".documents",
        "read_shipped_texts": ".documents",
        "shipped_corpus_path": ".documents",
    },
)
