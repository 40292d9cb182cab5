"""Pretraining an exported configuration at full scale: the exported-config file format (`export_format`),
the run itself (`run.pretrain`: the budget, the export applied, resume) and data parallelism under torchrun
(`data_parallel`)."""

from .export_format import ExportedConfig, ExportError, load_exported
from .run import PretrainError, pretrain

__all__ = ["ExportError", "ExportedConfig", "PretrainError", "load_exported", "pretrain"]
