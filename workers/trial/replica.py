"""Replica rungs: measure an architecture on the path its pretraining run will take (docs/design.md §5).

A trial's config is the *target*: the model to pretrain with T training FLOPs. Trained iso-FLOP it
sees D_T = T / (3 F_T) tokens for its N_T parameters (`count_parameters`), a ratio

    rho = D_T / N_T    (tokens per parameter)

Rung r of the replica ladder, with budget C_r < T, trains a *replica*: the same family, depth, MLP
ratio, MoD settings, ANCRe temperature and learning rate, at a narrower width d_r, under `completep`
(muP in width, CompleteP in depth) with the target as its base shape, for the tokens C_r / (3 F_r)
that C_r buys. d_r is the valid width whose on-path cost 3 F(d) rho N(d) (the compute of training
width d at the target's ratio) is nearest C_r in log: the replica then sees the target's tokens per
parameter up to the width grid's rounding, and costs exactly C_r (to whole batches).

- How it narrows is a `Narrowing` (`workers.trial.narrowing`). By default it keeps the head size (heads of
  the target's size, fewer of them, attention scaled as at the target), so that narrowing changes depth
  over width least, and is no narrower than half the target: valid widths are the multiples of the
  target's head size from that floor up to d_T. Keeping the head count instead (the head size shrinking:
  the direction in which `completep`'s attention rule is muP's) makes the valid widths the multiples of
  2 x n_heads (even head size, for RoPE).
- The base shape: a `standard` target becomes `completep` with (base_width, base_depth) = its own
  (d, L), which at full width is `standard` bit for bit; a `completep` target keeps its base shape.
  Either way the replica at the target's width is the target run itself.
- Off the path: when even the narrowest valid width costs more than C_r at the target's ratio, the
  rung trains that narrowest width for C_r / (3 F) tokens (fewer tokens per parameter than rho) and
  is marked `on_path = False`. Depth, family and the other knobs never change.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from search_spaces.residual_lm import ArchConfig, flops_per_token, parameter_count, training_flops

from ..data.batches import bits_per_byte, validation_tokens_per_byte
from ..data.corpus import TokenizedCorpus
from ..status import TrialStatus
from ..training.plans import BudgetPlan, InfeasibleBudget, LadderConfig, plan_budget
from ..training.records import RungRecord
from ..training.train import Report
from .contract import REMEASURE_SEED_OFFSET, TrialRequest, Verdict
from .narrowing import DEFAULT_MIN_WIDTH, Narrowing
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


def _parameters(cfg: ArchConfig) -> int:
    """count_parameters of `cfg`, in closed form."""
    return parameter_count(cfg)


@dataclass(frozen=True)
class TargetPath:
    """The target run: its parameters N_T, tokens D_T (whole batches) and ratio rho = D_T / N_T."""

    params: int
    tokens: int
    tokens_per_param: float


@dataclass(frozen=True)
class Replica:
    """What rung `rung` trains: `arch` for `plan.tokens` tokens at the rung's training budget."""

    rung: int
    budget_flops: float
    arch: ArchConfig
    plan: BudgetPlan
    params: int
    target: TargetPath
    on_path: bool

    @property
    def tokens_per_param(self) -> float:
        return self.plan.tokens / self.params

    @property
    def width_ratio(self) -> float:
        return self.arch.d_model / self.arch.base_width


def target_path(target: ArchConfig, target_flops: float, batch_size: int) -> TargetPath:
    """N_T, D_T and rho of the target trained iso-FLOP on `target_flops` (InfeasibleBudget below one step)."""
    tokens = plan_budget(target, target_flops, batch_size).tokens
    params = _parameters(target)
    return TargetPath(params, tokens, tokens / params)


def replica_arch(target: ArchConfig, width: int, narrowing: Narrowing | int = DEFAULT_MIN_WIDTH) -> ArchConfig:
    """The target at `width` under `completep`, its base shape the target's (or the target's own base); with
    heads of the target's size, `width / head size` of them."""
    if target.parametrization == "completep":
        base = {"base_width": target.base_width, "base_depth": target.base_depth}
    else:
        base = {"base_width": target.d_model, "base_depth": target.n_layers}
    update = {"d_model": width, "parametrization": "completep", **base}
    if Narrowing.of(narrowing).keep == "head_size" and width != target.d_model:  # at d_T: the target's heads
        base_head = target.base_head_dim or base["base_width"] // target.n_heads
        update |= {"n_heads": width // target.head_dim, "base_head_dim": base_head}
    return target.model_copy(update=update)


def replica_widths(target: ArchConfig, narrowing: Narrowing | int = DEFAULT_MIN_WIDTH) -> list[int]:
    """Valid replica widths, narrowest first, from the narrowing's floor up to d_T (and d_T): multiples of
    2 n_heads (even head size, for RoPE), or of the target's head size when the head size is kept."""
    narrowing = Narrowing.of(narrowing)
    step = target.head_dim if narrowing.keep == "head_size" else 2 * target.n_heads
    first = max(step, math.ceil(narrowing.floor(target) / step) * step)
    return sorted({*range(first, target.d_model, step), target.d_model})


def _on_path_flops(arch: ArchConfig, tokens_per_param: float) -> float:
    return training_flops(arch, tokens_per_param * _parameters(arch))


def plan_replica(
    target: ArchConfig,
    target_flops: float,
    rung: int,
    rung_flops: float,
    batch_size: int,
    min_width: Narrowing | int = DEFAULT_MIN_WIDTH,
) -> Replica:
    """The replica rung `rung` trains with `rung_flops` (<= target_flops), narrowed as `min_width` says (a
    `Narrowing`, or the narrowest width); InfeasibleBudget if its width cannot afford one step."""
    path = target_path(target, target_flops, batch_size)
    widths = replica_widths(target, min_width)

    def cost(i: int) -> float:
        return _on_path_flops(replica_arch(target, widths[i], min_width), path.tokens_per_param)

    # The on-path cost grows with width (F and N never shrink): bisect for the first width costing >= C_r,
    # then take it or the one below, whichever is nearer in log (a few shape-only builds, not one per width).
    low, high = 0, len(widths) - 1
    while low < high:
        mid = (low + high) // 2
        low, high = (mid + 1, high) if cost(mid) < rung_flops else (low, mid)
    on_path = cost(0) <= rung_flops
    if on_path and low > 0 and abs(math.log(cost(low - 1) / rung_flops)) < abs(math.log(cost(low) / rung_flops)):
        low -= 1
    arch = replica_arch(target, widths[low if on_path else 0], min_width)
    return Replica(rung, rung_flops, arch, plan_budget(arch, rung_flops, batch_size), _parameters(arch), path, on_path)


def rung_budgets(lowest_flops: float, ladder: LadderConfig) -> list[float]:
    """C_r = C eta^r for r = 0 .. rungs - 1, C the lowest rung's (the trial budget)."""
    return [lowest_flops * ladder.eta**r for r in range(ladder.rungs)]


def run_replica_trial(
    request: TrialRequest,
    corpus: TokenizedCorpus,
    report: Report | None = None,
    on_rung: OnReplicaRung | None = None,
) -> TrialResult:
    """Train the replica of each of `request.measurement`'s replica rungs in turn (the request's `arch` is the
    target), each its own run (`run_trial`) in this process, until `on_rung(rung record)` says `stop` or the top
    rung is done (`on_rung` is told every rung, the top one too, as on a budget ladder); never raises. When
    `on_rung` says `measure_again`, the rung's replica is trained once more with seed + `REMEASURE_SEED_OFFSET`
    and `on_rung` is told that record (its `seed` says which) and decides again.

    Every replica trains at the learning rate the target would use (`optim` at the target's horizon).
    The result describes the target (its arch and FLOPs per token: the search's objective), with the
    last rung's loss, the FLOPs and tokens of every replica run summed, and the rung records in `rungs`;
    the curve, diagnostics and width certificate are the last replica's.
    """
    target, m, run = request.arch, request.measurement, request.run
    start = time.perf_counter()
    results: list[TrialResult] = []
    rungs: list[RungRecord] = []
    tokens_per_byte = validation_tokens_per_byte(corpus, target.seq_len, run.eval_sequences)
    try:
        if not m.replica_rungs or m.target_flops is None:
            raise ValueError("the request's measurement has no replica rungs")
        path = target_path(target, m.target_flops, run.batch_size)
        optim = request.optim.at_horizon(target.residual, path.tokens)
        for index, flops in enumerate(m.replica_rungs):
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
