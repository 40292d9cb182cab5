"""Pretrain an exported configuration at full scale with the same model code and training loop.

`pretrain(exported, tokens=...)` calls `workers.training.train.train`, the loop every proxy trial ran, with
a bigger budget. The budget is iso-FLOP like the search's: D tokens cost C = 3 x F x D training
FLOPs, F the expected executed forward FLOPs per token; give `tokens` (D), `target_flops` (C), or
neither to use the export's `recommended` budget. Training is rounded to whole batches.

What the export adds to a freshly built model (`model_hook`, run by `train` right after
`build_model`, before the optimiser is built and before a checkpoint is loaded):

- **Frozen ANCRe coefficients** (`ancre.freeze`): logits c_ij = tau log p_ij (p clamped to >= 1e-12,
  each column renormalised), so softmax_i(c_ij / tau) = p_ij, and the logits stop requiring
  gradients: AdamW never touches a parameter without a gradient, so p stays exactly as set (ANCRe
  paper §5.5). Without `freeze` the model learns its connectivity from equal logits, as the proxy did.
- **MoD thresholds**: each routed sublayer's `threshold` and `eval_threshold` buffers start at the
  exported evaluation threshold. This is a warm start, not a constraint: training re-estimates the
  threshold from every batch's router scores (routing.py's integral controller), and the fresh
  routers' scores are on their own scale, so the exported values matter for the first batches and
  for evaluation before training moves them.
- **Device**: the model moves to the GPU (cuda:LOCAL_RANK) when there is one, and runs bf16
  autocast there (`RunConfig(precision="bf16")`); fp32 on the CPU. `run_overrides` can set either.

Checkpoints go to `out_dir/last.pt` every `checkpoint_every` steps (`RunConfig`), with
`pretrain.json` recording what the run is (export, budget, seed, batch, precision, data, world
size): a re-run with the same out_dir and settings resumes from the checkpoint and reproduces the
uninterrupted run; different settings are refused with the differing keys named. A completed run
writes `final.pt` (architecture, export and weights; `torch.load(weights_only=True)` reads it),
`tokenizer.json` beside it for a BPE run, and `summary.json`; re-running a completed run returns its
summary without training again.

**Data parallel (`torchrun --nproc_per_node=N`)**: `workers.pretrain.data_parallel.Parallel` (what is and is not
supported is said there).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError

from search_spaces.residual_lm import ResidualLM, config_error_message, forward_flops_per_token, training_flops
from search_spaces.residual_lm.ancre import AncreConnectivity

from ..data.batches import bits_per_byte, validation_tokens_per_byte
from ..data.config import DataConfig
from ..data.corpus import TokenizedCorpus, load_corpus
from ..ladder.plans import InfeasibleBudget, plan_budget
from ..status import TrialStatus
from ..strict_json import sanitise_json
from ..training.config import RunConfig
from ..training.train import Report, train
from .data_parallel import DataParallelError, Parallel
from .export_format import ExportedConfig

__all__ = ["P_FLOOR", "PretrainError", "apply_export", "budget_for", "model_hook", "pretrain"]

P_FLOOR = 1e-12  # smallest coefficient a frozen logit can express (tau log 1e-12 is finite)
CHECKPOINTS_PER_RUN = 20  # default checkpoint_every = steps / 20 ...
MAX_CHECKPOINT_EVERY = 1000  # ... but at least every 1000 steps
MANIFEST, SUMMARY, FINAL, TOKENIZER = "pretrain.json", "summary.json", "final.pt", "tokenizer.json"
# What a checkpoint is only valid for: resuming with any of these changed would not reproduce the run.
MANIFEST_KEYS = ("export", "budget_flops", "seed", "batch_size", "precision", "data", "world_size")


class PretrainError(ValueError):
    """A pretraining request that cannot run; the message is one line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


# ---- the budget ----------------------------------------------------------------------------------


def budget_for(exported: ExportedConfig, tokens: int | None = None, target_flops: float | None = None) -> float:
    """Training FLOPs: 3 x F x tokens, or target_flops, or the export's recommendation."""
    if tokens is not None and target_flops is not None:
        raise PretrainError("give --tokens or --target-flops, not both")
    if tokens is not None:
        integral = isinstance(tokens, int) or (isinstance(tokens, float) and tokens.is_integer())
        if isinstance(tokens, bool) or not integral or tokens < 1:
            raise PretrainError(f"--tokens: must be a whole number >= 1 (got {tokens!r})")
        return training_flops(exported.arch, int(tokens))
    if target_flops is not None:
        if not (isinstance(target_flops, (int, float)) and math.isfinite(target_flops) and target_flops > 0):
            raise PretrainError(f"--target-flops: must be a finite number > 0 (got {target_flops!r})")
        return float(target_flops)
    if exported.recommended is None:
        raise PretrainError("no budget: give --tokens N or --target-flops F (or export with --target-flops)")
    return training_flops(exported.arch, exported.recommended.tokens)


# ---- what the export adds to a freshly built model -----------------------------------------------


def frozen_logits(p: list[list[float]], n_layers: int, tau: float) -> torch.Tensor:
    """Flat logits c with softmax_i(c_ij / tau) = p_ij: c_ij = tau log p_ij, block j's from j(j-1)/2."""
    parts = []
    for j in range(1, n_layers + 1):
        column = torch.tensor([p[i][j - 1] for i in range(j)], dtype=torch.float64).clamp_min(P_FLOOR)
        parts.append(tau * torch.log(column / column.sum()))
    return torch.cat(parts)


@torch.no_grad()
def apply_export(model: ResidualLM, exported: ExportedConfig) -> None:
    """Frozen ANCRe logits (if `ancre.freeze`) and MoD thresholds from `exported`, in place."""
    if exported.ancre is not None and exported.ancre.freeze:
        conn = model.connectivity
        assert isinstance(conn, AncreConnectivity), "the export's arch is ANCRe (checked when it was loaded)"
        conn.logits.copy_(frozen_logits(exported.ancre.p, conn.n_layers, conn.tau))
        conn.logits.requires_grad_(False)
    routers = {f"{kind}{j}": r for (kind, j), r in model.routers().items()}
    for name, value in (exported.mod_thresholds or {}).items():
        routers[name].threshold.fill_(value)
        routers[name].eval_threshold.fill_(value)


def model_hook(exported: ExportedConfig, device: torch.device, parallel: Parallel) -> Callable[[ResidualLM], None]:
    """What `train(model_hook=...)` runs on the new model: device, export, data-parallel hooks."""

    def hook(model: ResidualLM) -> None:
        model.to(device)
        apply_export(model, exported)
        if parallel.world_size > 1:
            parallel.attach(model)

    return hook


# ---- pretraining -----------------------------------------------------------------------------------


def pretrain(
    exported: ExportedConfig,
    *,
    tokens: int | None = None,
    target_flops: float | None = None,
    data: DataConfig = DataConfig(),
    out_dir: str | Path,
    seed: int = 0,
    report: Report | None = None,
    run_overrides: dict[str, Any] | None = None,
) -> dict:
    """Train `exported` at full scale; return a summary (see `_summary`). Resumes from `out_dir`.

    Raises `PretrainError` (one line) for a bad budget, bad `run_overrides` or an `out_dir` that
    holds a different run. A diverged or stopped run is returned, not raised (its `status` says).
    """
    start = time.perf_counter()
    budget = budget_for(exported, tokens, target_flops)
    try:
        parallel = Parallel.from_env()
        try:
            return _pretrain(exported, budget, data, Path(out_dir), seed, report, run_overrides or {}, parallel, start)
        finally:
            parallel.close()
    except DataParallelError as err:
        raise PretrainError(str(err)) from None


def _pretrain(
    exported: ExportedConfig,
    budget: float,
    data: DataConfig,
    out_dir: Path,
    seed: int,
    report: Report | None,
    overrides: dict,
    parallel: Parallel,
    start: float,
) -> dict:
    cfg = exported.arch
    device = parallel.device()
    checkpoint_dir = parallel.checkpoint_dir(out_dir)
    run = _run_config(exported, overrides, budget / parallel.world_size, checkpoint_dir, device)
    corpus = parallel.shard(load_corpus(data))
    _check_tokenizer(exported, corpus)
    tokens_per_byte = validation_tokens_per_byte(corpus, cfg.seq_len, run.eval_sequences)
    manifest = _manifest(exported, budget, seed, run, corpus, parallel)
    ckpt = checkpoint_dir / "last.pt"
    done, refused = None, None
    try:
        done = _check_out_dir(checkpoint_dir, manifest, ckpt)
    except PretrainError as err:
        refused = err
    if parallel.any(refused is not None):  # every rank stops, or none does
        raise refused or PretrainError("another rank refused its checkpoint directory (see rank 0's error)")
    all_done = not parallel.any(done is None)  # a collective: every rank calls it
    if all_done and done is not None:
        return done
    resumed_from = parallel.agree_on_step(_checkpoint_step(ckpt))
    try:
        outcome = train(
            cfg,
            budget / parallel.world_size,
            corpus,
            optim=exported.optim,
            run=run,
            seed=seed,
            report=parallel.report(report),
            model_hook=model_hook(exported, device, parallel),
        )
    except InfeasibleBudget as err:
        raise PretrainError(f"budget too small: {err}") from None
    summary = _summary(outcome, exported, budget, run, parallel, resumed_from, ckpt, out_dir, start, tokens_per_byte)
    if parallel.rank == 0 and outcome.status == TrialStatus.COMPLETED:
        torch.save(
            {
                "arch": cfg.model_dump(),
                "export": exported.model_dump(mode="json"),
                "model": {k: v.cpu() for k, v in outcome.model.state_dict().items()},
            },
            out_dir / FINAL,
        )
        if corpus.path is not None and (corpus.path / TOKENIZER).is_file():  # a BPE: the model's ids mean its tokens
            shutil.copyfile(corpus.path / TOKENIZER, out_dir / TOKENIZER)
    _write_json(checkpoint_dir / SUMMARY, summary)  # every rank: a completed re-run returns at once
    return summary


def _check_tokenizer(exported: ExportedConfig, corpus: TokenizedCorpus) -> None:
    """The corpus must be tokenised as the search's was (same tokenizer identity, vocabulary within arch)."""
    want = exported.tokenizer.identity
    if corpus.tokenizer != want:
        raise PretrainError(
            f"--data: the corpus is tokenised with {corpus.tokenizer} ({corpus.tokenizer_spec}), but the exported "
            f"config was searched with {want}; pass --tokenizer with the search's tokenizer"
        )


def _run_config(
    exported: ExportedConfig, overrides: dict, rank_budget: float, checkpoint_dir: Path, device: torch.device
) -> RunConfig:
    """Device precision < exported run fields < `overrides` (validated); checkpoints in out_dir."""
    if "checkpoint_dir" in overrides:
        raise PretrainError("run.checkpoint_dir: set by out_dir, not by run overrides")
    fields = {
        "precision": "bf16" if device.type == "cuda" else "fp32",
        **exported.run,
        **overrides,
        "checkpoint_dir": str(checkpoint_dir),
    }
    try:
        run = RunConfig(**fields)
        if "checkpoint_every" not in overrides:
            steps = plan_budget(exported.arch, rank_budget, run.batch_size).steps
            run = run.model_copy(
                update={"checkpoint_every": min(MAX_CHECKPOINT_EVERY, max(1, steps // CHECKPOINTS_PER_RUN))}
            )
    except ValidationError as err:
        raise PretrainError(config_error_message(err, prefix="run.")) from None
    except InfeasibleBudget as err:
        raise PretrainError(f"budget too small: {err}") from None
    return run


def _manifest(
    exported: ExportedConfig, budget: float, seed: int, run: RunConfig, corpus: TokenizedCorpus, parallel: Parallel
) -> dict:
    export = exported.model_dump(mode="json", exclude={"provenance", "recommended"})
    return {
        "export": export,
        "budget_flops": budget,
        "seed": seed,
        "batch_size": run.batch_size,
        "precision": run.precision,
        "data": corpus.fingerprint,
        "world_size": parallel.world_size,
    }


def _check_out_dir(directory: Path, manifest: dict, ckpt: Path) -> dict | None:
    """Refuse a directory holding another run; the stored summary if this run already completed.

    A directory with a manifest but neither checkpoint nor summary (a run that failed before its
    first checkpoint) is simply reused with the new manifest.
    """
    path, summary = directory / MANIFEST, directory / SUMMARY
    if path.exists() and (ckpt.exists() or summary.exists()):
        stored = json.loads(path.read_text())
        differ = [k for k in MANIFEST_KEYS if stored.get(k) != manifest[k]]
        if differ:
            raise PretrainError(
                f"--out {directory} holds a run with a different {', '.join(differ)}: "
                "use a fresh --out, or the same settings to resume"
            )
        done = json.loads(summary.read_text()) if summary.exists() else {}
        return {**done, "already_complete": True} if done.get("status") == TrialStatus.COMPLETED else None
    if ckpt.exists():
        raise PretrainError(f"--out {directory} holds a checkpoint but no {MANIFEST}: not a pretraining run")
    directory.mkdir(parents=True, exist_ok=True)
    _write_json(path, manifest)
    return None


def _checkpoint_step(ckpt: Path) -> int:
    """The step of the checkpoint `train` will resume from (0 if none); mmap: reads no weights."""
    if not ckpt.exists():
        return 0
    return int(torch.load(ckpt, weights_only=True, mmap=True, map_location="cpu")["state"]["step"])


def _summary(
    outcome,
    exported: ExportedConfig,
    budget: float,
    run: RunConfig,
    parallel: Parallel,
    resumed_from: int,
    ckpt: Path,
    out_dir: Path,
    start: float,
    tokens_per_byte: float,
) -> dict:
    state = outcome.state
    tokens, flops = parallel.sum(state.tokens_seen), parallel.sum(state.training_flops)
    completed = outcome.status == TrialStatus.COMPLETED
    loss = state.val_loss if completed else math.inf
    return {
        "status": outcome.status,
        "failure_reason": outcome.failure_reason,
        "val_loss": loss,
        "val_bpb": bits_per_byte(loss, tokens_per_byte),
        "last_val_loss": state.val_loss,
        "tokens_seen": int(tokens),
        "planned_tokens": outcome.plan.tokens * parallel.world_size,
        "steps": state.step,
        "planned_steps": outcome.plan.steps,
        "training_flops": flops,
        "budget_flops": budget,
        "executed_flops_per_token": outcome.plan.executed_flops_per_token,
        "realised_flops_per_token": forward_flops_per_token(flops, tokens) if tokens else None,
        "wall_time_s": time.perf_counter() - start,
        "step_seconds": state.step_seconds,
        "resumed_from_step": resumed_from,
        "precision": run.precision,
        "batch_size": run.batch_size,
        "world_size": parallel.world_size,
        "device": str(next(outcome.model.parameters()).device),
        "ancre_frozen": bool(exported.ancre and exported.ancre.freeze),
        "checkpoint": str(ckpt),
        "final_model": str(out_dir / FINAL) if completed else None,
        "out_dir": str(out_dir),
        "against_the_search": against_the_search(exported.recommended, budget, loss),
    }


def against_the_search(rec, budget: float, loss: float) -> dict | None:
    """The realised loss beside what the search forecast for this run: its loss at T, its 80% band, whether the
    realised loss lies in it, and the error (realised minus forecast). Only where the run spent the budget the
    forecast was for; None for an export without a recommendation."""
    if rec is None:
        return None
    same = math.isclose(budget, rec.target_flops, rel_tol=0.01)
    out: dict[str, Any] = {
        "forecast_for_flops": rec.target_flops,
        "forecast_loss": rec.predicted_loss,
        "forecast_band": list(rec.predicted_band) if rec.predicted_band else None,
        "corrected_top_rung_loss": rec.corrected_top_rung_loss,
        "realised_loss": loss,
        "same_budget": same,
    }
    if not same or rec.predicted_loss is None or not math.isfinite(loss):
        out["note"] = (
            "the run's budget is not the one the search forecast for"
            if not same
            else "the search stated no loss at T for this config (no level curve): nothing to compare"
            if rec.predicted_loss is None
            else "the run did not finish with a finite loss"
        )
        return out
    out["error"] = loss - rec.predicted_loss
    if rec.predicted_band is not None:
        low, high = rec.predicted_band
        out["within_band"] = low <= loss <= high
    return out


def _write_json(path: Path, data: dict) -> None:
    """Strict JSON (a diverged run's inf loss is written as null), atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(sanitise_json(data), indent=2, allow_nan=False) + "\n")
    tmp.replace(path)
