"""Export a search's best trials as YAML files that `nas pretrain` trains at full scale.

One file per chosen trial, `<search>-trial<N>.yaml`, plus `index.json` listing them. A file holds
everything the same model code needs to rebuild and retrain the architecture:

- `arch`, `optim`: the `ArchConfig` and `OptimConfig` the proxy trial actually ran;
- `run`: the `RunConfig` fields the search held fixed or searched (batch size, evaluation...),
  never checkpoint settings or precision, which belong to the machine that pretrains;
- `ancre`: the learned connectivity p_ij of an ANCRe trial, the (L + 1) x L matrix with
  P[i][j - 1] = p_ij (zero where i >= j), and `freeze`: pretrain with these coefficients fixed
  (ANCRe paper §5.5: frozen learned coefficients retrained from scratch keep nearly all of the gain)
  instead of learning them again from equal logits;
- `mod_thresholds`: the smoothed evaluation thresholds of the routed sublayers (`attn2`, `mlp2`...);
- `recommended`: with a target compute F, the iso-FLOP token count D = F / (3 x executed forward
  FLOPs per token), the same rule as the proxy trials (workers/train.py);
- `provenance`: search, trial, proxy loss and FLOPs, the proxy budget and tokens, the code version
  the search ran (`code_version`) and the one that exported (`exported_by`), and when.

`load_exported` validates a file like any other config and fails with one line naming the file and
the field. `export_configs` validates every chosen trial before it writes anything.
"""

from __future__ import annotations

import json
import math
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from search_spaces.residual_lm import ArchConfig, config_error_message, flops_per_token
from workers.train import OptimConfig, RunConfig

from .pareto import pareto_rows
from .store import Store, TrialRow

__all__ = ["AncreCoefficients", "ExportError", "ExportedConfig", "Provenance", "Recommendation",
           "export_configs", "export_file_name", "load_exported", "recommend"]

RUN_FIELDS_NOT_EXPORTED = ("checkpoint_dir", "checkpoint_every", "precision")  # chosen where it pretrains
P_SUM_TOLERANCE = 1e-3  # each column of p sums to one (softmax); stored as float64 from float32
HEADER = """\
# resnas export: search {search!r}, trial {trial} ({residual}, {n_layers} layers, d_model {d_model})
# proxy: val_loss {loss:.4f} nats/token at {flops:.4g} executed forward FLOPs/token
# Pretrain at full scale with the same model code:
#   nas pretrain {file} --tokens N        (or --target-flops F{rec})
# Every field is validated on load: edit with care (ArchConfig ranges, p shape, routed sublayers).
"""


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


class Provenance(_Frozen):
    search: str
    trial: int = Field(ge=0)
    proxy_val_loss: float
    executed_flops_per_token: float | None = None  # as the store recorded it for the proxy
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
    provenance: Provenance | None = None  # always written by export_configs; optional in a hand-written file

    @model_validator(mode="after")
    def _consistent(self) -> "ExportedConfig":
        _check_run(self.run)
        if self.ancre is not None:
            _check_ancre(self.ancre, self.arch)
        if self.mod_thresholds is not None:
            _check_thresholds(self.mod_thresholds, self.arch)
        if self.recommended is not None:
            _check_recommendation(self.recommended, self.arch)
        return self

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
            raise ValueError(f"ancre.p: column {j - 1} (into block {j}) must sum to 1 over rows 0..{j - 1} "
                             f"(got {sum(into):.6g})")
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
        raise ValueError(f"recommended.executed_flops_per_token: {rec.executed_flops_per_token:.6g} is not this "
                         f"architecture's {executed:.6g} (arch edited? re-export, or delete 'recommended')")
    if abs(rec.tokens - rec.target_flops / (3.0 * executed)) > 1.0:
        raise ValueError(f"recommended.tokens: {rec.tokens} is not target_flops / (3 x executed_flops_per_token) "
                         f"= {rec.target_flops / (3.0 * executed):.6g}")


# ---- building and reading ----------------------------------------------------------------------

def recommend(arch: ArchConfig, target_flops: float) -> Recommendation:
    """The iso-FLOP token count D = F / (3 x executed forward FLOPs per token), rounded."""
    _check_target_flops(target_flops)
    executed = flops_per_token(arch).executed
    tokens = round(target_flops / (3.0 * executed))
    if tokens < 1:
        raise ExportError(f"--target-flops: {target_flops:.3g} FLOPs buy less than one token "
                          f"(3 x {executed:.3g} FLOPs per token)")
    return Recommendation(target_flops=float(target_flops), tokens=tokens, executed_flops_per_token=executed)


def _check_target_flops(target_flops: float) -> None:
    if isinstance(target_flops, bool) or not isinstance(target_flops, (int, float)) \
            or not math.isfinite(target_flops) or target_flops <= 0:
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


def export_file_name(search: str, trial: int) -> str:
    """`<search>-trial<N>.yaml`, with characters unsafe in file names replaced by '_'."""
    return f"{re.sub(r'[^A-Za-z0-9._-]', '_', search)}-trial{trial}.yaml"


def _fields_of(model: type[BaseModel], *sources: dict) -> dict:
    """The keys of `sources` (later ones win) that are fields of `model`."""
    out: dict = {}
    for source in sources:
        out.update({k: v for k, v in source.items() if k in model.model_fields})
    return out


def exported_config(store: Store, search, row: TrialRow, *, target_flops: float | None,
                    freeze_ancre: bool) -> ExportedConfig:
    """The validated export of completed trial `row` of `search` (a SearchRow)."""
    fixed = (search.space.get("fixed") if isinstance(search.space, dict) else None) or {}
    flat = {k: v for k, v in row.config.items() if k not in ("arch", "optim")}
    arch_raw = row.config.get("arch") or _fields_of(ArchConfig, fixed, flat)
    optim_raw = row.config.get("optim") or _fields_of(OptimConfig, fixed, flat)
    run = {k: v for k, v in _fields_of(RunConfig, fixed, flat).items() if k not in RUN_FIELDS_NOT_EXPORTED}
    label = f"search {search.name!r} trial {row.number}"
    try:
        arch = ArchConfig.model_validate(arch_raw)
    except ValidationError as err:
        raise ExportError(f"{label}: stored architecture is invalid: {config_error_message(err, 'arch.')}") from None
    diagnostics = store.diagnostics(row.id) or {}
    ancre = None
    if arch.residual == "ancre":
        p = diagnostics.get("ancre_p")
        if p is None:
            raise ExportError(f"{label}: no learned ANCRe coefficients (diagnostics.ancre_p) in the store")
        ancre = {"p": p, "freeze": freeze_ancre}
    thresholds = {k: v for k, v in (diagnostics.get("mod_threshold") or {}).items() if v is not None}
    data = {
        "arch": arch, "optim": optim_raw, "run": run, "ancre": ancre, "mod_thresholds": thresholds or None,
        "recommended": None if target_flops is None else recommend(arch, target_flops),
        "provenance": {
            "search": search.name, "trial": row.number, "proxy_val_loss": row.val_loss,
            "executed_flops_per_token": row.executed_flops_per_token, "proxy_budget_flops": row.budget_flops,
            "tokens_seen": row.tokens_seen, "code_version": search.code_version, "exported_by": _code_version(),
            "exported_at": datetime.now(timezone.utc).replace(microsecond=0),
        },
    }
    try:
        return ExportedConfig.model_validate(data)
    except ValidationError as err:
        raise ExportError(f"{label}: cannot export: {config_error_message(err)}") from None


def _code_version() -> str:
    from .search import code_version  # imports optuna: only when exporting

    return code_version()


def chosen_trials(store: Store, name: str, *, pareto: bool, trial: int | None) -> list[TrialRow]:
    """Trial `trial` (which must be completed), else the completed Pareto front; ExportError if none."""
    rows = store.trials(name)  # UnknownSearch (a StoreError naming it) if there is no such search
    if trial is not None:
        found = [r for r in rows if r.number == trial]
        if not found:
            known = f"{rows[0].number}..{rows[-1].number}" if rows else "none"
            raise ExportError(f"--trial: search {name!r} has no trial {trial} (trials: {known})")
        row = found[0]
        if row.status != "completed":
            reason = f" ({row.failure_reason})" if row.failure_reason else ""
            raise ExportError(f"--trial: trial {trial} of search {name!r} is {row.status}{reason}; "
                              "only completed trials can be exported")
        return [row]
    if not pareto:
        raise ExportError("choose the trials: --pareto or --trial N")
    front = pareto_rows(rows)
    if not front:
        raise ExportError(f"--pareto: search {name!r} has no completed trials with a finite loss")
    return front


def export_configs(store: Store, name: str, out_dir: str | Path, *, pareto: bool = True, trial: int | None = None,
                   target_flops: float | None = None, freeze_ancre: bool = False) -> list[Path]:
    """Write one YAML per chosen trial and `index.json` into `out_dir`; return the YAML paths.

    `trial` (if given) exports that trial, else `pareto` exports the completed non-dominated trials
    (nas.pareto.pareto_rows). `freeze_ancre` marks ANCRe coefficients for freezing (an error with
    `trial` if that trial is not ANCRe; trials of other families on a front simply have none).
    Everything is validated before anything is written; errors are one-line `ExportError`s or
    the store's `StoreError`s (unknown search).
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"--out: {out_dir} exists and is not a directory")
    if target_flops is not None:
        _check_target_flops(target_flops)  # the flag's own check, before touching the store
    search = store.get_search(name)
    rows = chosen_trials(store, name, pareto=pareto, trial=trial)
    exports = [exported_config(store, search, row, target_flops=target_flops, freeze_ancre=freeze_ancre)
               for row in rows]
    if freeze_ancre and trial is not None and exports[0].ancre is None:
        raise ExportError(f"--freeze-ancre: trial {trial} of search {name!r} is {exports[0].arch.residual}, "
                          "not an ANCRe architecture")
    # Everything is valid: write.
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [_write_yaml(out_dir / export_file_name(name, e.provenance.trial), e) for e in exports]
    _write_atomic(out_dir / "index.json", json.dumps(_index(name, exports, paths, target_flops), indent=2) + "\n")
    return paths


def _write_yaml(path: Path, exported: ExportedConfig) -> Path:
    rec = exported.recommended
    header = HEADER.format(
        search=exported.provenance.search, trial=exported.provenance.trial, residual=exported.arch.residual,
        n_layers=exported.arch.n_layers, d_model=exported.arch.d_model, loss=exported.provenance.proxy_val_loss,
        flops=flops_per_token(exported.arch).executed, file=path.name,
        rec=f"; recommended: {rec.tokens} tokens for {rec.target_flops:.3g} FLOPs" if rec else "")
    body = yaml.safe_dump(exported.to_yaml_dict(), sort_keys=False, default_flow_style=False, allow_unicode=True)
    _write_atomic(path, header + body)
    return path


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _index(name: str, exports: Sequence[ExportedConfig], paths: Sequence[Path], target_flops: float | None) -> dict:
    return {
        "search": name,
        "target_flops": target_flops,
        "exported_at": exports[0].provenance.exported_at.isoformat(),
        "configs": [
            {"file": p.name, "trial": e.provenance.trial, "residual": e.arch.residual, "n_layers": e.arch.n_layers,
             "d_model": e.arch.d_model, "mod_rate": e.arch.mod_rate, "val_loss": e.provenance.proxy_val_loss,
             "executed_flops_per_token": flops_per_token(e.arch).executed,
             "recommended_tokens": e.recommended.tokens if e.recommended else None,
             "ancre_frozen": bool(e.ancre and e.ancre.freeze)}
            for e, p in zip(exports, paths)
        ],
    }
