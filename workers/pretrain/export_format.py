"""The exported-config file format: what `nas export` writes and `nas pretrain` (workers.pretrain.run) reads.

One YAML file per exported trial holds everything the same model code needs to rebuild and
retrain the architecture:

- `arch`, `optim`: the `ArchConfig` and `OptimConfig` the proxy trial actually ran, with the search's
  learning-rate schedule (`optim.schedule`, `optim.warmup`, `optim.cooldown`), which `nas pretrain`
  follows; an `optim` that names no schedule ran a cosine, and is read as `cosine`;
- `run`: the `RunConfig` fields the search held fixed or searched (batch size, evaluation...),
  never checkpoint settings or precision, which belong to the machine that pretrains;
- `ancre`: the learned connectivity p_ij of an ANCRe trial, the (L + 1) x L matrix with
  P[i][j - 1] = p_ij (zero where i >= j), and `freeze`: pretrain with these coefficients fixed
  (ANCRe paper §5.5: frozen learned coefficients retrained from scratch keep nearly all of the gain)
  instead of learning them again from equal logits;
- `mod_thresholds`: the smoothed evaluation thresholds of the routed sublayers (`attn2`, `mlp2`...);
- `recommended`: with a target compute C, the iso-FLOP token count D = C / (3 x executed forward
  FLOPs per token) (`search_spaces.residual_lm.tokens_for`), the same rule as the proxy trials;
- `tokenizer`: the tokeniser the search trained with: its identity (`workers.data.tokenizer`), its spec,
  its vocabulary, and `file`, the `tokenizer.json` written beside this file (none for bytes);
  `nas pretrain` tokenises with it and refuses a corpus tokenised otherwise;
- `provenance`: search, trial, proxy loss and FLOPs, the proxy budget and tokens, the code version
  the search ran (`code_version`) and the one that exported (`exported_by`), and when.

`load_exported` validates a file like any other config and fails with one line (`ExportError`)
naming the file and the field.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from search_spaces.residual_lm import ArchConfig, config_error_message, flops_per_token, tokens_for

from ..training.config import OptimConfig, RunConfig

__all__ = [
    "RUN_FIELDS_NOT_EXPORTED",
    "AncreCoefficients",
    "ExportError",
    "ExportedConfig",
    "Provenance",
    "Recommendation",
    "TokenizerRecord",
    "check_target_flops",
    "load_exported",
    "recommend",
    "routed_sublayers",
]

RUN_FIELDS_NOT_EXPORTED = ("checkpoint_dir", "checkpoint_every", "precision")  # chosen where it pretrains
P_SUM_TOLERANCE = 1e-3  # each column of p sums to one (softmax); stored as float64 from float32


class ExportError(ValueError):
    """An export or exported file that cannot be used; the message is one line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AncreCoefficients(_Frozen):
    p: list[list[float]] = Field(description="(L + 1) x L, P[i][j - 1] = p_ij, zero where i >= j")
    freeze: bool = False


class Recommendation(_Frozen):
    target_flops: float = Field(gt=0, allow_inf_nan=False, description="training FLOPs of the full-scale run")
    tokens: int = Field(ge=1, description="target_flops / (3 x executed_flops_per_token)")
    executed_flops_per_token: float = Field(gt=0, allow_inf_nan=False)
    predicted_loss: float | None = Field(
        None, description="the search's forecast of the loss at target_flops (nats/token; None: no curve carried it)"
    )
    predicted_band: tuple[float, float] | None = Field(
        None, description="its central 80% band, from the search's error model (None: no forecast)"
    )
    corrected_top_rung_loss: float | None = Field(
        None, description="where the search had no curve to T: its top rung's loss, bias taken out (not a loss at T)"
    )
    predictor: str | None = Field(
        None, description="how the search predicted it: 'top rung' (carried on its curve) or 'weighted fit'"
    )
    basis: str | None = Field(None, description="what the prediction rests on: the rungs and their weights")


class TokenizerRecord(_Frozen):
    identity: str = Field("bytes", description="'bytes' or 'sha256:' + sha256 of the tokenizer's to_str()")
    spec: str = Field("bytes", description="the search's --tokenizer")
    vocab_size: int = Field(256, ge=2, description="the tokenizer's ids; arch.vocab_size may pad it")
    file: str | None = Field(None, description="tokenizer.json beside the exported file (relative path)")


class Provenance(_Frozen):
    search: str
    trial: int = Field(ge=0)
    proxy_val_loss: float
    executed_flops_per_token: float | None = None  # as the store recorded it for the proxy
    # counted inference costs (nas.space.objectives): KV-cache bytes and decode FLOPs per token at kv_context
    kv_context: int | None = None  # the config's seq_len
    kv_bytes_per_token: float | None = None
    decode_flops_per_token: float | None = None
    proxy_budget_flops: float | None = None
    tokens_seen: int | None = None
    code_version: str | None = None  # the code the search ran
    exported_by: str | None = None  # the code that wrote this file
    exported_at: datetime


class ExportedConfig(_Frozen):
    """One exported configuration; validated as a whole (see the module docstring)."""

    arch: ArchConfig
    optim: OptimConfig = OptimConfig()
    run: dict[str, Any] = Field(default_factory=dict)
    ancre: AncreCoefficients | None = None
    mod_thresholds: dict[str, float] | None = None
    recommended: Recommendation | None = None
    tokenizer: TokenizerRecord = TokenizerRecord()
    provenance: Provenance | None = None  # always written by export_configs; optional in a hand-written file

    @model_validator(mode="before")
    @classmethod
    def _schedule_of_older_files(cls, data: Any) -> Any:
        optim = data.get("optim") if isinstance(data, dict) else None
        if isinstance(optim, dict) and "schedule" not in optim:
            return {**data, "optim": {**optim, "schedule": "cosine"}}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> ExportedConfig:
        _check_run(self.run)
        if self.ancre is not None:
            _check_ancre(self.ancre, self.arch)
        if self.mod_thresholds is not None:
            _check_thresholds(self.mod_thresholds, self.arch)
        if self.recommended is not None:
            _check_recommendation(self.recommended, self.arch)
        if self.arch.vocab_size < self.tokenizer.vocab_size:
            raise ValueError(
                f"arch.vocab_size {self.arch.vocab_size} is smaller than the tokenizer's {self.tokenizer.vocab_size}"
            )
        return self

    def tokenizer_spec(self, exported_file: Path) -> str:
        """What to tokenise with: the tokenizer.json beside `exported_file` if recorded, else the spec."""
        if self.tokenizer.file is not None:
            return str((exported_file.parent / self.tokenizer.file).resolve())
        return self.tokenizer.spec

    def run_config(self, **overrides: Any) -> RunConfig:
        """The exported run fields plus `overrides`, as a RunConfig."""
        return RunConfig(**{**self.run, **overrides})

    def to_yaml_dict(self) -> dict:
        """Plain data in a human reading order (the field order above)."""
        return self.model_dump(mode="json")


# ---- validation of the parts that pydantic's field types cannot express ------------------------


def _check_run(run: dict) -> None:
    unknown = [k for k in run if k not in RunConfig.model_fields or k in ("checkpoint_dir", "checkpoint_every")]
    if unknown:
        allowed = [k for k in RunConfig.model_fields if k not in ("checkpoint_dir", "checkpoint_every")]
        raise ValueError(f"run.{unknown[0]}: not an exportable run field (one of {', '.join(allowed)})")
    try:
        RunConfig(**run)
    except ValidationError as err:
        raise ValueError(config_error_message(err, prefix="run.")) from None


def _check_ancre(ancre: AncreCoefficients, arch: ArchConfig) -> None:
    if arch.residual != "ancre":
        raise ValueError(f"ancre: only an ANCRe architecture has coefficients (arch.residual is {arch.residual!r})")
    n = arch.n_layers
    if len(ancre.p) != n + 1 or any(len(row) != n for row in ancre.p):
        shape = f"{len(ancre.p)} x {sorted({len(r) for r in ancre.p})}"
        raise ValueError(f"ancre.p: must be (n_layers + 1) x n_layers = {n + 1} x {n} (got {shape})")
    for j in range(1, n + 1):
        column = [ancre.p[i][j - 1] for i in range(n + 1)]
        into = column[:j]
        if not all(math.isfinite(x) and 0.0 <= x <= 1.0 for x in into):
            raise ValueError(f"ancre.p: column {j - 1} (into block {j}) must hold values in [0, 1] (got {into})")
        if abs(sum(into) - 1.0) > P_SUM_TOLERANCE:
            raise ValueError(
                f"ancre.p: column {j - 1} (into block {j}) must sum to 1 over rows 0..{j - 1} (got {sum(into):.6g})"
            )
        if any(x != 0.0 for x in column[j:]):
            raise ValueError(f"ancre.p: column {j - 1} must be 0 in rows {j}..{n} (no shortcut from block i >= j)")


def routed_sublayers(arch: ArchConfig) -> list[str]:
    """The names `attn<j>` / `mlp<j>` of the routed sublayers, as the model's diagnostics name them."""
    return [f"{kind}{j}" for j in arch.routed_blocks for kind in ("attn", "mlp")]


def _check_thresholds(thresholds: dict[str, float], arch: ArchConfig) -> None:
    routed = routed_sublayers(arch)
    for name, value in thresholds.items():
        if name not in routed:
            where = ", ".join(routed) if routed else "none: arch.mod_rate is 0"
            raise ValueError(f"mod_thresholds.{name}: not a routed sublayer of this architecture (routed: {where})")
        if not math.isfinite(value):
            raise ValueError(f"mod_thresholds.{name}: must be finite (got {value})")


def _check_recommendation(rec: Recommendation, arch: ArchConfig) -> None:
    executed = flops_per_token(arch).executed
    if not math.isclose(rec.executed_flops_per_token, executed, rel_tol=1e-9):
        raise ValueError(
            f"recommended.executed_flops_per_token: {rec.executed_flops_per_token:.6g} is not this "
            f"architecture's {executed:.6g} (arch edited? re-export, or delete 'recommended')"
        )
    bought = tokens_for(arch, rec.target_flops)
    if abs(rec.tokens - bought) > 1.0:
        raise ValueError(
            f"recommended.tokens: {rec.tokens} is not target_flops / (3 x executed_flops_per_token) = {bought:.6g}"
        )


# ---- building and reading ----------------------------------------------------------------------


def recommend(arch: ArchConfig, target_flops: float) -> Recommendation:
    """The iso-FLOP token count D = F / (3 x executed forward FLOPs per token), rounded."""
    check_target_flops(target_flops)
    executed = flops_per_token(arch).executed
    tokens = round(tokens_for(arch, target_flops))
    if tokens < 1:
        raise ExportError(
            f"--target-flops: {target_flops:.3g} FLOPs buy less than one token (3 x {executed:.3g} FLOPs per token)"
        )
    return Recommendation(target_flops=float(target_flops), tokens=tokens, executed_flops_per_token=executed)


def check_target_flops(target_flops: float) -> None:
    """`--target-flops` must be a finite number > 0; ExportError otherwise."""
    if (
        isinstance(target_flops, bool)
        or not isinstance(target_flops, (int, float))
        or not math.isfinite(target_flops)
        or target_flops <= 0
    ):
        raise ExportError(f"--target-flops: must be a finite number > 0 (got {target_flops!r})")


def load_exported(path: str | Path) -> ExportedConfig:
    """Read and validate an exported YAML file; `ExportError` (one line naming file and field) if unusable."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise ExportError(f"{path}: cannot read: {err.strerror or err}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ExportError(f"{path}: invalid YAML{where}: {getattr(err, 'problem', None) or err}") from None
    if not isinstance(raw, dict):
        raise ExportError(f"{path}: expected a mapping with arch, optim, run, ... (got {type(raw).__name__})")
    try:
        return ExportedConfig.model_validate(raw)
    except ValidationError as err:
        raise ExportError(f"{path}: {config_error_message(err)}") from None
