"""Replica rungs, run: each rung of a replica ladder trains its replica (`workers.ladder.replica`: the width, the
tokens and the maths of the target's path) as its own run, until the rung gate says stop or the top rung is
reached; the trial's result describes the target.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from search_spaces.residual_lm import ArchConfig, flops_per_token

from ..data.batches import bits_per_byte, validation_tokens_per_byte
from ..data.corpus import TokenizedCorpus
from ..ladder.narrowing import Narrowing
from ..ladder.plans import InfeasibleBudget
from ..ladder.replica import Replica, TargetPath, plan_replica, replica_arch, replica_widths, rung_budgets, target_path
from ..status import TrialStatus
from ..training.records import RungRecord
from ..training.train import Report
from .contract import REMEASURE_SEED_OFFSET, TrialRequest, Verdict
from .result import TrialResult
from .run import one_line, run_trial

__all__ = [
    "Narrowing",
    "OnReplicaRung",
    "Replica",
    "TargetPath",
    "plan_replica",
    "replica_arch",
    "replica_widths",
    "rung_budgets",
    "run_replica_trial",
    "target_path",
]

OnReplicaRung = Callable[[RungRecord], Verdict]  # told each rung's record: climb, stop, or measure it again


def run_replica_trial(
    request: TrialRequest,
    corpus: TokenizedCorpus,
    report: Report | None = None,
    on_rung: OnReplicaRung | None = None,
) -> TrialResult:
    """Train the replica of each of `request.ladder_plan`'s replica rungs in turn (the request's `arch` is the
    target), each its own run (`run_trial`) in this process, until `on_rung(rung record)` says `stop` or the top
    rung is done (`on_rung` is told every rung, the top one too, as on a budget ladder); never raises. When
    `on_rung` says `measure_again`, the rung's replica is trained once more with seed + `REMEASURE_SEED_OFFSET`
    and `on_rung` is told that record (its `seed` says which) and decides again.

    Every replica trains at the learning rate the target would use (`optim` at the target's horizon).
    The result describes the target (its arch and FLOPs per token: the search's objective), with the
    last rung's loss, the FLOPs and tokens of every replica run summed, and the rung records in `rungs`;
    the curve, diagnostics and width certificate are the last replica's.
    """
    target, m, run = request.arch, request.ladder_plan, request.run
    start = time.perf_counter()
    results: list[TrialResult] = []
    rungs: list[RungRecord] = []
    tokens_per_byte = validation_tokens_per_byte(corpus, target.seq_len, run.eval_sequences)
    try:
        if not m.replica_flops or m.target_flops is None:
            raise ValueError("the request's ladder plan has no replica rungs")
        path = target_path(target, m.target_flops, run.batch_size)
        optim = request.optim.at_horizon(target.residual, path.tokens)
        for index, flops in enumerate(m.replica_flops):
            replica = plan_replica(target, m.target_flops, index, flops, run.batch_size, m.narrowing)
            verdict = Verdict.MEASURE_AGAIN
            for seed in (request.seed, request.seed + REMEASURE_SEED_OFFSET):
                result = run_trial(
                    replica.arch, flops, corpus, seed, report, optim=optim, run=run, width_probe=request.width_probe
                )
                results.append(result)
                if result.status != TrialStatus.COMPLETED:
                    break
                rungs.append(_rung_record(index, replica, result, seed))
                verdict = on_rung(rungs[-1]) if on_rung is not None else Verdict.CLIMB  # told every rung
                if verdict != Verdict.MEASURE_AGAIN:
                    break
            if result.status != TrialStatus.COMPLETED or verdict != Verdict.CLIMB:
                break
    except InfeasibleBudget as err:
        return _target_result(
            target, results, rungs, tokens_per_byte, start, TrialStatus.INFEASIBLE, f"infeasible: {err}"
        )
    except Exception as err:  # a crashing trial is recorded, never raised into the search
        return _target_result(target, results, rungs, tokens_per_byte, start, TrialStatus.FAILED, one_line(err))
    last = results[-1]
    return _target_result(target, results, rungs, tokens_per_byte, start, last.status, last.failure_reason)


def _rung_record(index: int, replica: Replica, result: TrialResult, seed: int) -> RungRecord:
    """A replica rung as the store keeps it: the fields of a budget-ladder rung, the seed it ran with, and the
    replica's (its width, parameters, tokens per parameter against the target's, whether it is on the path)."""
    return RungRecord(
        rung=index,
        seed=seed,
        budget_flops=replica.budget_flops,
        steps=result.steps,
        tokens=result.tokens_seen,
        val_loss=result.val_loss,
        training_flops=result.training_flops,
        train_seconds=result.wall_time_s,
        d_model=replica.arch.d_model,
        params=replica.params,
        tokens_per_param=replica.tokens_per_param,
        target_tokens_per_param=replica.target.tokens_per_param,
        on_path=replica.on_path,
    )


def _target_result(
    target: ArchConfig,
    results: list[TrialResult],
    rungs: list[RungRecord],
    tokens_per_byte: float,
    start: float,
    status,
    reason: str | None,
) -> TrialResult:
    fpt = flops_per_token(target)
    last = results[-1] if results else None
    completed = status == TrialStatus.COMPLETED and bool(rungs)
    last_rung = [r.val_loss for r in rungs if r.rung == rungs[-1].rung] if rungs else []
    loss = sum(last_rung) / len(last_rung) if completed else math.inf  # the seed mean of a rung measured twice
    wall = time.perf_counter() - start
    tokens = sum(r.tokens_seen for r in results)
    return TrialResult(
        status=status,
        failure_reason=reason,
        val_loss=loss,
        val_bpb=bits_per_byte(loss, tokens_per_byte),
        nominal_flops_per_token=fpt.nominal,
        executed_flops_per_token=fpt.executed,
        realised_flops_per_token=last.realised_flops_per_token if last else None,
        budget_flops=rungs[-1].budget_flops if rungs else (last.budget_flops if last else 0.0),
        training_flops=sum(r.training_flops for r in results),
        tokens_seen=tokens,
        planned_tokens=sum(r.planned_tokens for r in results),
        steps=sum(r.steps for r in results),
        wall_time_s=wall,
        tokens_per_s=tokens / wall if wall > 0 else 0.0,
        step_time_share=sum(r.step_time_share * r.wall_time_s for r in results if r.step_time_share) / wall
        if wall > 0
        else None,
        peak_memory_mb=max((r.peak_memory_mb for r in results), default=0.0),
        diagnostics=last.diagnostics if last else {},
        width=last.width if last else None,
        curve=last.curve if last else [],
        rungs=rungs,
        arch=target,
        optim=last.optim if last else None,
        seed=last.seed if last else 0,
    )
