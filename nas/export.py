"""Export a search's best trials as files that `nas pretrain` trains at full scale.

One file per chosen trial, `<search>-trial<N>.yaml` (the format is `workers.pretrain.export_format`), plus
`index.json` listing them with what the answer rests on (`nas.answer.decisions.rests_on`: size against
architecture, decisions at matched cost resolved or tied; the search's answer as `nas show` prints it,
`nas.search_answer`), and for a search with a tokenizer other than bytes, its
`<search>-tokenizer.json`, which every file names and `nas pretrain` tokenises with. `index.json` also carries
each knob's effect on the loss at T at equal FLOPs per token (`nas.answer.effects`), beside the configs.
`export_configs` turns store rows into those files, and validates every chosen trial before it
writes anything.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from search_spaces.residual_lm import ArchConfig, config_error_message, flops_per_token
from workers.pretrain.export_format import (
    RUN_FIELDS_NOT_EXPORTED,
    ExportedConfig,
    ExportError,
    Recommendation,
    check_target_flops,
    recommend,
)
from workers.status import TrialStatus
from workers.training.config import OptimConfig, RunConfig

from .answer.target import Prediction
from .search_answer import SearchAnswer, search_answer
from .space.objectives import inference_cost
from .store import Store, TrialRow
from .version import code_version

__all__ = ["ExportError", "export_configs", "export_file_name"]

HEADER = """\
# resnas export: search {search!r}, trial {trial} ({residual}, {n_layers} layers, d_model {d_model})
# proxy: val_loss {loss:.4f} nats/token at {flops:.4g} executed forward FLOPs/token
{rec}# Pretrain at full scale with the same model code:
#   nas pretrain {file}        (the recommended budget; or --tokens N, or --target-flops F)
# Every field is validated on load: edit with care (ArchConfig ranges, p shape, routed sublayers).
"""


def export_file_name(search: str, trial: int) -> str:
    """`<search>-trial<N>.yaml`, with characters unsafe in file names replaced by '_'."""
    return f"{_safe(search)}-trial{trial}.yaml"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def tokenizer_record(search) -> dict:
    """The `tokenizer` part of an export: the search's stored corpus summary (bytes where it records no
    tokenizer), and the name of the tokenizer file written beside it."""
    corpus = (search.settings or {}).get("corpus") or {}
    identity = corpus.get("tokenizer", "bytes")
    return {
        "identity": identity,
        "spec": corpus.get("tokenizer_spec", "bytes"),
        "vocab_size": corpus.get("vocab_size", 256),
        "file": None if identity == "bytes" else f"{_safe(search.name)}-tokenizer.json",
    }


def _tokenizer_json(search, record: dict) -> str | None:
    """The search's tokenizer.json text (from its corpus cache, rebuilt if gone); ExportError if the
    corpus now loads with another tokenizer."""
    if record["file"] is None:
        return None
    from workers.data.config import DataConfig
    from workers.data.corpus import load_corpus

    corpus = load_corpus(DataConfig(**((search.settings or {}).get("data") or {})))
    if corpus.tokenizer != record["identity"] or corpus.path is None:
        raise ExportError(
            f"search {search.name!r} was tokenised with {record['identity']}, its corpus now loads with "
            f"{corpus.tokenizer}: the tokenizer cannot be exported"
        )
    return (corpus.path / "tokenizer.json").read_text(encoding="utf-8")


def _fields_of(model: type[BaseModel], *sources: dict) -> dict:
    """The keys of `sources` (later ones win) that are fields of `model`."""
    out: dict = {}
    for source in sources:
        out.update({k: v for k, v in source.items() if k in model.model_fields})
    return out


def exported_config(
    store: Store,
    search,
    row: TrialRow,
    *,
    target_flops: float | None,
    freeze_ancre: bool,
    prediction: Prediction | None = None,
) -> ExportedConfig:
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
        "arch": arch,
        "optim": optim_raw,
        "run": run,
        "ancre": ancre,
        "mod_thresholds": thresholds or None,
        "recommended": None if target_flops is None else _recommendation(arch, target_flops, prediction),
        "tokenizer": tokenizer_record(search),
        "provenance": {
            "search": search.name,
            "trial": row.number,
            "proxy_val_loss": row.val_loss,
            "executed_flops_per_token": row.executed_flops_per_token,
            "proxy_budget_flops": row.budget_flops,
            "tokens_seen": row.tokens_seen,
            "code_version": search.code_version,
            "exported_by": code_version(),
            "exported_at": datetime.now(timezone.utc).replace(microsecond=0),
        },
    }
    data["provenance"] |= inference_fields(arch)
    try:
        return ExportedConfig.model_validate(data)
    except ValidationError as err:
        raise ExportError(f"{label}: cannot export: {config_error_message(err)}") from None


def _recommendation(arch: ArchConfig, target_flops: float, prediction: Prediction | None) -> Recommendation:
    rec = recommend(arch, target_flops)
    if prediction is None or not math.isfinite(prediction.loss):
        return rec
    at_t = prediction.at_target
    band = (
        (prediction.low, prediction.high)
        if at_t and prediction.low is not None and prediction.high is not None
        else None
    )
    return rec.model_copy(
        update={
            "predicted_loss": prediction.loss if at_t else None,
            "predicted_band": band,
            "corrected_top_rung_loss": None if at_t else prediction.loss,
            "predictor": prediction.predictor,
            "basis": prediction.basis,
        }
    )


def chosen_trials(found: SearchAnswer, *, pareto: bool, trial: int | None) -> list[TrialRow]:
    """Trial `trial` (which must be completed), else the completed front at the target of the search's answer
    `found` (by the measured loss for a search without rungs), as the stored rows; ExportError if none."""
    rows, name = found.rows, found.name
    if trial is not None:
        row = next((r for r in rows if r.number == trial), None)
        if row is None:
            known = f"{rows[0].number}..{rows[-1].number}" if rows else "none"
            raise ExportError(f"--trial: search {name!r} has no trial {trial} (trials: {known})")
        if row.status != TrialStatus.COMPLETED:
            reason = f" ({row.failure_reason})" if row.failure_reason else ""
            raise ExportError(
                f"--trial: trial {trial} of search {name!r} is {row.status}{reason}; "
                "only completed trials can be exported"
            )
        return [row]
    if not pareto:
        raise ExportError("choose the trials: --pareto or --trial N")
    by_number = {r.number: r for r in rows}  # the stored rows, with their measured losses
    front = [by_number[r.number] for r in found.front]
    if not front:
        raise ExportError(f"--pareto: search {name!r} has no completed trials with a finite loss")
    return front


def export_configs(
    store: Store,
    name: str,
    out_dir: str | Path,
    *,
    pareto: bool = True,
    trial: int | None = None,
    target_flops: float | None = None,
    freeze_ancre: bool = False,
) -> list[Path]:
    """Write one YAML per chosen trial and `index.json` into `out_dir`; return the YAML paths.

    `trial` (if given) exports that trial, else `pareto` exports the completed trials on the front at the target
    (`nas.search_answer`: the answer `nas show` prints, at `target_flops` when given). `freeze_ancre` marks ANCRe
    coefficients for freezing (an error with `trial` if that trial is not ANCRe; trials of other families on a
    front simply have none). Everything is validated before anything is written; errors are one-line
    `ExportError`s or the store's `StoreError`s (unknown search).
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"--out: {out_dir} exists and is not a directory")
    if target_flops is not None:
        check_target_flops(target_flops)  # the flag's own check, before touching the store
    found = search_answer(store, name, target_flops)
    rows = chosen_trials(found, pareto=pareto, trial=trial)
    exports = [
        exported_config(
            store,
            found.search,
            row,
            target_flops=found.target,
            freeze_ancre=freeze_ancre,
            prediction=found.predictions.get(row.number),
        )
        for row in rows
    ]
    if freeze_ancre and trial is not None and exports[0].ancre is None:
        raise ExportError(
            f"--freeze-ancre: trial {trial} of search {name!r} is {exports[0].arch.residual}, not an ANCRe architecture"
        )
    tokenizer = _tokenizer_json(found.search, exports[0].tokenizer.model_dump())
    effects = _effects(found)
    # Everything is valid: write.
    out_dir.mkdir(parents=True, exist_ok=True)
    if tokenizer is not None:
        _write_atomic(out_dir / exports[0].tokenizer.file, tokenizer)
    paths = [_write_yaml(out_dir / export_file_name(name, e.provenance.trial), e) for e in exports]
    index = _index(name, exports, paths, found.target) | {"rests_on": list(found.rests_on), "effects": effects}
    index["measured_as"] = _measured_as(found)
    _write_atomic(out_dir / "index.json", json.dumps(index, indent=2) + "\n")
    return paths


def _measured_as(found: SearchAnswer) -> dict | None:
    """How the search measured its trials: its layout and why, how its replicas narrowed, the top rung's bias its
    answer takes out, and its anchors."""
    budget = found.budget
    if budget is None:
        return None
    answer = found.answer
    return {
        "layout": budget.ladder.layout.reason,
        "rungs": budget.ladder.trial_plan.rungs,
        "narrowing": budget.narrowing.model_dump() if budget.ladder_kind == "replica" else None,
        "bias_prior": budget.bias_prior,
        "bias_taken_out": answer.discrepancy.describe() if answer is not None and answer.discrepancy else None,
        "anchors": budget.anchor_plan().reason,
    }


def _write_yaml(path: Path, exported: ExportedConfig) -> Path:
    rec = exported.recommended
    header = HEADER.format(
        search=exported.provenance.search,
        trial=exported.provenance.trial,
        residual=exported.arch.residual,
        n_layers=exported.arch.n_layers,
        d_model=exported.arch.d_model,
        loss=exported.provenance.proxy_val_loss,
        flops=flops_per_token(exported.arch).executed,
        file=path.name,
        rec=_recommendation_note(rec),
    )
    body = yaml.safe_dump(exported.to_yaml_dict(), sort_keys=False, default_flow_style=False, allow_unicode=True)
    _write_atomic(path, header + body)
    return path


def _recommendation_note(rec: Recommendation | None) -> str:
    if rec is None:
        return ""
    note = f"# target: {rec.target_flops:.3g} training FLOPs = {rec.tokens:,} tokens for this architecture"
    if rec.predicted_loss is not None:
        band = "no band" if rec.predicted_band is None else "80% band {:.4f}-{:.4f}".format(*rec.predicted_band)
        note += f"\n#   forecast loss at T {rec.predicted_loss:.4f} nats/token ({band})"
        note += f", {rec.predictor}: {rec.basis}" if rec.predictor else ""
    elif rec.corrected_top_rung_loss is not None:
        note += (
            f"\n#   top rung's loss, bias taken out, {rec.corrected_top_rung_loss:.4f} nats/token: not a loss at T "
            "(the search had no level curve to carry it there)"
        )
    return note + "\n"


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
            {
                "file": p.name,
                "trial": e.provenance.trial,
                "residual": e.arch.residual,
                "n_layers": e.arch.n_layers,
                "d_model": e.arch.d_model,
                "mod_rate": e.arch.mod_rate,
                "val_loss": e.provenance.proxy_val_loss,
                "executed_flops_per_token": flops_per_token(e.arch).executed,
                **inference_fields(e.arch),
                "recommended_tokens": e.recommended.tokens if e.recommended else None,
                "forecast_loss_at_target": e.recommended.predicted_loss if e.recommended else None,
                "forecast_band": e.recommended.predicted_band if e.recommended else None,
                "corrected_top_rung_loss": e.recommended.corrected_top_rung_loss if e.recommended else None,
                "predictor": e.recommended.predictor if e.recommended else None,
                "predicted_from": e.recommended.basis if e.recommended else None,
                "schedule": e.optim.schedule,
                "ancre_frozen": bool(e.ancre and e.ancre.freeze),
            }
            for e, p in zip(exports, paths, strict=False)
        ],
    }


def inference_fields(arch: ArchConfig) -> dict:
    """The exported config's counted inference costs (`nas.space.objectives`): KV-cache bytes and decode FLOPs
    per token, at `kv_context` = its seq_len."""
    cost = inference_cost(arch)
    if cost is None:
        return {}
    return {
        "kv_context": cost.context,
        "kv_bytes_per_token": cost.kv_bytes_per_token,
        "decode_flops_per_token": cost.decode_flops_per_token,
    }


def _effects(found: SearchAnswer) -> dict | None:
    """Each knob's effect on the loss at T at equal FLOPs per token, with its 80% interval
    (`nas.answer.effects.search_effects`); None without an answer at T or without a stored space."""
    from .answer.search_effects import search_effects
    from .space import SpaceError, space_from_dict, to_optuna_distributions

    if found.answer is None:
        return None
    try:
        distributions = to_optuna_distributions(space_from_dict(found.search.space))
    except SpaceError:
        return None
    return search_effects(found.rows, found.answer, distributions, "flops").as_dict()
