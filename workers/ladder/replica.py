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

- How it narrows is a `Narrowing` (`workers.ladder.narrowing`). By default it keeps the head size (heads of
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
from dataclasses import dataclass

from search_spaces.residual_lm import ArchConfig, parameter_count, training_flops

from .narrowing import DEFAULT_NARROWING, Narrowing
from .plans import BudgetPlan, RungSpacing, plan_budget

__all__ = ["Replica", "TargetPath", "plan_replica", "replica_arch", "replica_widths", "rung_budgets", "target_path"]


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


def replica_arch(target: ArchConfig, width: int, narrowing: Narrowing = DEFAULT_NARROWING) -> ArchConfig:
    """The target at `width` under `completep`, its base shape the target's (or the target's own base); with
    heads of the target's size, `width / head size` of them."""
    if target.parametrization == "completep":
        base = {"base_width": target.base_width, "base_depth": target.base_depth}
    else:
        base = {"base_width": target.d_model, "base_depth": target.n_layers}
    update = {"d_model": width, "parametrization": "completep", **base}
    if narrowing.keep == "head_size" and width != target.d_model:  # at d_T: the target's heads
        base_head = target.base_head_dim or base["base_width"] // target.n_heads
        update |= {"n_heads": width // target.head_dim, "base_head_dim": base_head}
    return target.model_copy(update=update)


def replica_widths(target: ArchConfig, narrowing: Narrowing = DEFAULT_NARROWING) -> list[int]:
    """Valid replica widths, narrowest first, from the narrowing's floor up to d_T (and d_T): multiples of
    2 n_heads (even head size, for RoPE), or of the target's head size when the head size is kept."""
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
    narrowing: Narrowing = DEFAULT_NARROWING,
) -> Replica:
    """The replica rung `rung` trains with `rung_flops` (<= target_flops), narrowed as `narrowing` says;
    InfeasibleBudget if its width cannot afford one step."""
    path = target_path(target, target_flops, batch_size)
    widths = replica_widths(target, narrowing)

    def cost(i: int) -> float:
        return _on_path_flops(replica_arch(target, widths[i], narrowing), path.tokens_per_param)

    # The on-path cost grows with width (F and N never shrink): bisect for the first width costing >= C_r,
    # then take it or the one below, whichever is nearer in log (a few shape-only builds, not one per width).
    low, high = 0, len(widths) - 1
    while low < high:
        mid = (low + high) // 2
        low, high = (mid + 1, high) if cost(mid) < rung_flops else (low, mid)
    on_path = cost(0) <= rung_flops
    if on_path and low > 0 and abs(math.log(cost(low - 1) / rung_flops)) < abs(math.log(cost(low) / rung_flops)):
        low -= 1
    arch = replica_arch(target, widths[low if on_path else 0], narrowing)
    return Replica(rung, rung_flops, arch, plan_budget(arch, rung_flops, batch_size), _parameters(arch), path, on_path)


def rung_budgets(lowest_flops: float, spacing: RungSpacing) -> list[float]:
    """C_r = C eta^r for r = 0 .. rungs - 1, C the lowest rung's (the trial budget)."""
    return [lowest_flops * spacing.eta**r for r in range(spacing.rungs)]
