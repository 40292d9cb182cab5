"""One trial, one call: `run_trial(cfg, budget, data, seed) -> TrialResult`, usable without Ray or Optuna.

A trial never raises: an infeasible budget, a divergence, an out-of-memory or any other crash
comes back as a `TrialResult` with its status and a one-line reason, and loss = inf.

Where the process sees a GPU (a Ray trial given a GPU share sees exactly its own), the trial trains
there in bf16 autocast, with the fused Triton kernels; otherwise on the CPU with `run.precision`.
"""

from __future__ import annotations

import errno
import math
import resource
import sys
import time
from dataclasses import replace

import torch

from search_spaces.residual_lm import ArchConfig, flops_per_token, forward_flops_per_token

from ..data.batches import bits_per_byte, validation_tokens_per_byte
from ..data.config import DataConfig
from ..data.corpus import TokenizedCorpus, load_corpus
from ..ladder.plans import InfeasibleBudget, RungSpacing
from ..status import TrialStatus
from ..training.config import OptimConfig, RunConfig
from ..training.train import OnRung, Report, TrainOutcome, train
from .result import TrialResult
from .width_probe import width_certificate

__all__ = ["is_disk_full", "one_line", "peak_memory_mb", "run_trial", "trial_device"]


def peak_memory_mb() -> float:
    """Peak resident memory of this process (CPU) or peak allocated CUDA memory, in MB."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KB on Linux, bytes on macOS
    return rss / (2**20 if sys.platform == "darwin" else 2**10)


def trial_device() -> torch.device:
    """The first visible GPU if there is one, else the CPU."""
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def one_line(err: BaseException) -> str:
    """The failure reason stored for a crashed trial: `Kind: first line`, prefixed `out of memory:` or
    `disk full:` when that is what happened, so both read the same whatever raised them."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    if isinstance(err, MemoryError) or "out of memory" in text.lower():
        return f"out of memory: {type(err).__name__}: {text}"[:500]
    if is_disk_full(err):
        return f"disk full: {type(err).__name__}: {text}"[:500]
    return f"{type(err).__name__}: {text}"[:500]


def is_disk_full(err: BaseException) -> bool:
    """ENOSPC, raised by Python as OSError or by torch's writer as a RuntimeError naming it."""
    if isinstance(err, OSError) and err.errno == errno.ENOSPC:
        return True
    return "no space left on device" in str(err).lower() or (err.__cause__ is not None and is_disk_full(err.__cause__))


def _diagnostics(outcome: TrainOutcome) -> dict:
    """One recorded forward pass over the first held-out batch."""
    model = outcome.model.eval()
    with torch.no_grad(), model.recording_diagnostics():
        model(outcome.val_batches[0][0])
    return model.diagnostics()


def run_trial(
    cfg: ArchConfig,
    budget_flops: float,
    data: TokenizedCorpus | DataConfig | None = None,
    seed: int = 0,
    report: Report | None = None,
    *,
    optim: OptimConfig = OptimConfig(),
    run: RunConfig = RunConfig(),
    width_probe: bool = True,
    spacing: RungSpacing | None = None,
    on_rung: OnRung | None = None,
) -> TrialResult:
    """Train `cfg` under `budget_flops` training FLOPs on `data` (default: the shipped corpus).

    With `spacing` (a budget ladder), `budget_flops` is the top rung's budget and `on_rung` decides after each rung
    whether the run goes on (`workers.training.train.train`); `val_loss` is then the last rung's loss.
    """
    start = time.perf_counter()
    fpt = flops_per_token(cfg)
    untrained = TrialResult.untrained(TrialStatus.FAILED, None, fpt.executed, start)
    planned = replace(untrained, nominal_flops_per_token=fpt.nominal, budget_flops=budget_flops, arch=cfg, optim=optim,
                      seed=seed)  # fmt: skip
    device = trial_device()
    try:
        corpus = data if isinstance(data, TokenizedCorpus) else load_corpus(data or DataConfig())
        if device.type == "cuda":
            run = run.model_copy(update={"precision": "bf16"})
        outcome = train(
            cfg,
            budget_flops,
            corpus,
            optim=optim,
            run=run,
            seed=seed,
            report=report,
            model_hook=lambda model: model.to(device),
            spacing=spacing,
            on_rung=on_rung,
        )
    except InfeasibleBudget as err:
        return _failed(planned, TrialStatus.INFEASIBLE, f"infeasible: {err}", start)
    except Exception as err:  # a crashing trial is recorded, never raised into the search
        return _failed(planned, TrialStatus.FAILED, one_line(err), start)
    return _finish(
        outcome, planned, start, width_probe, validation_tokens_per_byte(corpus, cfg.seq_len, run.eval_sequences)
    )


def _failed(planned: TrialResult, status: TrialStatus, reason: str, start: float) -> TrialResult:
    """A run that ended before it trained: no loss, nothing spent, the process's peak memory."""
    wall = time.perf_counter() - start
    return replace(planned, status=status, failure_reason=reason, wall_time_s=wall, peak_memory_mb=peak_memory_mb())


def _finish(
    outcome: TrainOutcome, planned: TrialResult, start: float, width_probe: bool, tokens_per_byte: float
) -> TrialResult:
    """The result of a run that trained: `planned` (what was asked) with what it measured."""
    state, completed = outcome.state, outcome.status == TrialStatus.COMPLETED
    diagnostics, width = {}, None
    if outcome.status != TrialStatus.DIVERGED:
        diagnostics = _diagnostics(outcome)
        if width_probe and completed:
            x, y = (torch.cat(t) for t in zip(*outcome.val_batches, strict=False))
            width = width_certificate(outcome.model, x, y)
    wall = time.perf_counter() - start
    loss = state.val_loss if completed else math.inf
    return replace(
        planned,
        status=outcome.status,
        failure_reason=outcome.failure_reason,
        val_loss=loss,
        val_bpb=bits_per_byte(loss, tokens_per_byte),
        realised_flops_per_token=forward_flops_per_token(state.training_flops, state.tokens_seen)
        if state.tokens_seen
        else None,
        training_flops=state.training_flops,
        tokens_seen=state.tokens_seen,
        planned_tokens=outcome.plan.tokens,
        steps=state.step,
        wall_time_s=wall,
        tokens_per_s=state.tokens_seen / wall if wall > 0 else 0.0,
        step_time_share=state.step_seconds / wall if wall > 0 else None,
        peak_memory_mb=peak_memory_mb(),
        diagnostics=diagnostics,
        width=width,
        curve=state.curve,
        rungs=state.rungs,
        branch_flops=state.branch_flops,
        budget_flops=state.rungs[-1].budget_flops if state.rungs else planned.budget_flops,
    )
