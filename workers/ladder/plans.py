"""Iso-FLOP budget plans: the steps one training budget buys (`plan_budget`), and a ladder (`plan_ladder`).

A config whose executed forward pass costs F FLOPs per token trains on D = C / (3 F) tokens for a
training budget C, rounded to whole batches (within half a batch of D).

A ladder measures one run at several iso-FLOP budgets (rungs). Rung r of k has the training
budget C_r = C_top / eta^(k-1-r) (geometric, C_top the trial's budget) and trains on
D_r = C_r / (3 F) tokens, rounded to whole batches: s_r steps. The learning rate follows
warmup-stable-decay (Hagele et al., arXiv 2405.18392; `workers.training.schedules`): a linear warm-up over
`warmup` x s_0 steps (the lowest rung's share, so every rung has the same warm-up), then constant,
then a linear decay to lr x min_lr_ratio over the last `cooldown` x s_r steps of rung r's own schedule
(`OptimConfig.cooldown`).
The main run decays at the top rung; for every lower rung the trainer branches a copy of the
stable state at step s_r - round(cooldown x s_r), decays the copy over its cooldown, evaluates
it and discards it (`workers.training.train`), so the losses of all rungs come from equal fractions of
their own schedules, and the main run continues unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from search_spaces.residual_lm import ArchConfig, flops_per_token, tokens_for, training_flops

__all__ = ["BudgetPlan", "InfeasibleBudget", "Rung", "RungSpacing", "plan_budget", "plan_ladder"]


class RungSpacing(BaseModel):
    """How many rungs a ladder has, and the budget ratio between successive rungs (each rung's cooldown share is the
    schedule's: `OptimConfig.cooldown`). No defaults: a search's are its `Budget`'s (`nas.space.budget`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rungs: int = Field(ge=1, le=8, description="budgets measured per trial, the top one the trial budget")
    eta: float = Field(ge=1.5, le=10, description="budget ratio between successive rungs")


class InfeasibleBudget(ValueError):
    """The budget cannot pay for a single training step of this config."""


@dataclass(frozen=True)
class BudgetPlan:
    executed_flops_per_token: float
    tokens_per_step: int
    steps: int

    @property
    def tokens(self) -> int:
        return self.steps * self.tokens_per_step


def plan_budget(cfg: ArchConfig, budget_flops: float, batch_size: int) -> BudgetPlan:
    """Steps that spend `budget_flops` at 3x the expected executed forward FLOPs per token."""
    per_token = flops_per_token(cfg).executed
    tokens_per_step = batch_size * cfg.seq_len
    tokens = tokens_for(cfg, budget_flops)
    if tokens < tokens_per_step:
        raise InfeasibleBudget(
            f"budget {budget_flops:.3g} FLOPs < one step ({training_flops(cfg, tokens_per_step):.3g} FLOPs "
            f"= 3 x {per_token:.3g} FLOPs/token x {tokens_per_step} tokens)"
        )
    return BudgetPlan(per_token, tokens_per_step, max(1, round(tokens / tokens_per_step)))


@dataclass(frozen=True)
class Rung:
    """One rung: its index, training budget, and the steps that buy it."""

    index: int
    budget_flops: float
    plan: BudgetPlan

    @property
    def steps(self) -> int:
        return self.plan.steps

    def decay_start(self, cooldown: float) -> int:
        """The step at which this rung's cooldown begins (the branch point of a lower rung)."""
        return self.steps - round(cooldown * self.steps)


def plan_ladder(cfg: ArchConfig, top_flops: float, spacing: RungSpacing, batch_size: int) -> list[Rung]:
    """The rungs of a trial whose top rung spends `top_flops`; InfeasibleBudget if the lowest cannot
    pay for one step. (Rungs so small that two round to the same steps are both kept: measured twice.)"""
    return [
        Rung(index, flops, plan_budget(cfg, flops, batch_size))
        for index in range(spacing.rungs)
        for flops in [top_flops / spacing.eta ** (spacing.rungs - 1 - index)]
    ]
