"""The workers: the replica ladder and budget plans (`ladder/`), one proxy trial (`trial/`), the iso-FLOP trainer
every run uses (`training/`), the data pipeline
(`data/`), pretraining at full scale (`pretrain/`) and the Hugging Face release (`release/`). `status` is the one
vocabulary of trial statuses and `strict_json` keeps result records strict JSON."""

from typing import TYPE_CHECKING

from .lazy import lazy_exports

if TYPE_CHECKING:
    from .data.batches import TrainBatches, validation_batches
    from .data.config import DataConfig
    from .data.corpus import TokenizedCorpus, load_corpus
    from .data.documents import byte_tokens, read_shipped_texts, shipped_corpus_path
    from .ladder.plans import InfeasibleBudget, RungSpacing, plan_budget, plan_ladder
    from .training.config import OptimConfig, RunConfig
    from .training.train import train
    from .trial.result import TrialResult, WidthCertificate
    from .trial.run import run_trial
    from .trial.width_probe import width_certificate

__all__ = [
    "DataConfig",
    "InfeasibleBudget",
    "OptimConfig",
    "RunConfig",
    "RungSpacing",
    "TokenizedCorpus",
    "TrainBatches",
    "TrialResult",
    "WidthCertificate",
    "byte_tokens",
    "load_corpus",
    "plan_budget",
    "plan_ladder",
    "read_shipped_texts",
    "run_trial",
    "shipped_corpus_path",
    "train",
    "validation_batches",
    "width_certificate",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "TrainBatches": ".data.batches",
        "validation_batches": ".data.batches",
        "DataConfig": ".data.config",
        "TokenizedCorpus": ".data.corpus",
        "load_corpus": ".data.corpus",
        "byte_tokens": ".data.documents",
        "read_shipped_texts": ".data.documents",
        "shipped_corpus_path": ".data.documents",
        "OptimConfig": ".training.config",
        "RunConfig": ".training.config",
        "InfeasibleBudget": ".ladder.plans",
        "RungSpacing": ".ladder.plans",
        "plan_budget": ".ladder.plans",
        "plan_ladder": ".ladder.plans",
        "train": ".training.train",
        "TrialResult": ".trial.result",
        "WidthCertificate": ".trial.result",
        "run_trial": ".trial.run",
        "width_certificate": ".trial.width_probe",
    },
)
