"""One proxy trial: data, iso-FLOP training, evaluation and the width certificate."""

from .batches import TrainBatches, validation_batches
from .data import TokenizedCorpus, load_corpus
from .data_config import DataConfig
from .documents import byte_tokens, read_shipped_texts, shipped_corpus_path
from .plans import InfeasibleBudget, LadderConfig, plan_budget, plan_ladder
from .train import OptimConfig, RunConfig, train
from .trial import TrialResult, run_trial
from .width_probe import WidthCertificate, width_certificate

__all__ = [
    "DataConfig",
    "InfeasibleBudget",
    "LadderConfig",
    "OptimConfig",
    "RunConfig",
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
