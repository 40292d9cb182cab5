"""Compute budgets of a search (docs/design.md §3.6): what the user asks, one field per command-line option.

`Budget` holds what the user gives on the command line: `--trial-flops` (C, the iso-FLOP budget every trial gets:
the lowest rung of its ladder) and either `--trials` or `--search-flops` (C x trials; the number of trials is then
floor(search / trial)), the rungs asked (`--rungs`, `--eta`), what a rung trains (`--ladder`), how replicas
narrow (`narrowing`, from `--narrowing`, `--min-replica-width`, `--min-replica-share`), the target T
(`--target-flops`), anchors, the bias prior and the tokens-per-parameter range at T. What follows from it is
resolved once by the ladder package: `Budget.ladder` is the `workers.ladder.SearchLadder` the trials climb (its
kind, the rungs laid out by cost, T, the plan every trial receives). Bad values raise `BudgetError` with one line
naming the CLI option, e.g. `--trial-flops: must be > 0 (got -1.0)`.

`check_budget_fits` rejects, before anything runs, a trial budget below one training step of the cheapest
architecture of the space, or a space whose cheapest architecture would see fewer tokens per parameter at T than
`--min-tokens-per-param`; `trial_is_feasible` gives the reason one sampled architecture cannot afford a step or lies
outside that range at T (the search records such a trial as infeasible without training it: the answer at T is
where pretraining is plausible). A budget stored by an older resnas is read through
`nas.store.migrations.upgrade_budget`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from search_spaces.residual_lm import ArchConfig, flops_per_token, training_flops
from workers.ladder.layout import AnchorPlan, LevelPlan
from workers.ladder.narrowing import Narrowing
from workers.ladder.plans import BudgetPlan, InfeasibleBudget, RungSpacing, plan_budget
from workers.ladder.replica import plan_replica, target_path
from workers.ladder.search_ladder import DEFAULT_TARGET_RATIO, SearchLadder, resolve_ladder
from workers.ladder.trial_plan import LadderKind
from workers.training.config import RunConfig

from . import CategoricalParam, SearchSpace, cheapest_of, describe
from .messages import options_message

__all__ = [
    "DEFAULT_MIN_TOKENS_PER_PARAM",
    "DEFAULT_TRIALS",
    "VALIDATED_TARGET_RATIO",
    "Budget",
    "BudgetError",
    "TokensPerParam",
    "budget_error_message",
    "check_budget_fits",
    "space_batch_size",
    "stored_budget",
    "tokens_per_param_at_target",
    "trial_is_feasible",
]

DEFAULT_TRIALS = 20  # when neither --trials nor --search-flops is given
# A config trained at T on fewer tokens per parameter than this is far from compute-optimal (Chinchilla's ratio
# is ~20; small models are best at more): its answer at T is not plausible, so a search does not spend a trial on
# it. On `make fidelity`'s truths no config below it ranked in the better half (benchmarks/README.md).
DEFAULT_MIN_TOKENS_PER_PARAM = 4.0
VALIDATED_TARGET_RATIO = DEFAULT_TARGET_RATIO  # T / top rung checked by `make fidelity`; the default --target-flops
LayoutRule = Literal["by_cost", "as_given"]
BiasPriorChoice = Literal["measured", "none"]


class BudgetError(ValueError):
    """A budget that cannot be used; the message is one line naming the CLI option."""


def _num(x: float) -> str:
    """Compact FLOP counts: 2e12, 1e3, 1.08e9."""
    text = f"{x:.3g}"
    return re.sub(r"e([+-])0*(\d+)", lambda m: "e" + ("-" if m[1] == "-" else "") + m[2], text)


def budget_error_message(err: ValidationError | BudgetError) -> str:
    """One line naming each offending CLI option: `--trial-flops: must be > 0 (got -1.0)`."""
    return options_message(err, Budget.OPTIONS) if isinstance(err, ValidationError) else str(err)


class Budget(BaseModel):
    """What a user asks of a search's compute (module docstring); `ladder` is what follows from it.

    `Budget(...)` raises BudgetError (one line); `Budget.model_validate` raises pydantic's
    ValidationError, which `budget_error_message` turns into the same line.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    # the command-line option of each field whose option is not its name with dashes
    OPTIONS: ClassVar[dict[tuple[str, ...], str]] = {
        ("ladder_kind",): "--ladder",
        ("narrowing", "keep"): "--narrowing",
        ("narrowing", "min_width"): "--min-replica-width",
        ("narrowing", "min_share"): "--min-replica-share",
    }

    trial_flops: float = Field(gt=0, allow_inf_nan=False, description="training FLOPs of every trial (C)")
    trials: int | None = Field(None, ge=1, description=f"number of trials (default {DEFAULT_TRIALS})")
    search_flops: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="FLOPs of the whole search: floor(search / trial) trials"
    )
    max_trial_seconds: float | None = Field(None, gt=0, description="wall-clock cap of one trial")
    max_search_seconds: float | None = Field(None, gt=0, description="wall-clock cap of the search")
    rungs: int = Field(2, ge=1, le=8, description="budgets per trial: C, eta C, ... (1 = no ladder)")
    eta: float = Field(2.0, ge=1.5, le=10, allow_inf_nan=False, description="budget ratio between rungs")
    layout: LayoutRule = Field(
        "by_cost", description="by_cost: a replica ladder that saves no compute trains every config at its top rung"
    )
    target_flops: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="training FLOPs of the planned pretraining run (T)"
    )
    ladder_kind: LadderKind = Field(
        "replica", description="what a rung trains: a replica on the target's path, or the config"
    )
    narrowing: Narrowing = Field(Narrowing(), description="how a replica narrows its target")
    anchors: int = Field(0, ge=0, le=64, description="anchors trained above the top rung (0 or 1: none)")
    anchor_share: float = Field(
        0.2, ge=0.0, le=10.0, allow_inf_nan=False, description="most the anchors may cost, as a share of the trials'"
    )
    bias_prior: BiasPriorChoice = Field(
        "measured", description="the top rung's bias taken out of the answer: measured on the fidelity corpora, or none"
    )
    anchor_flops: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="training FLOPs of an anchor (default: T/3; T itself is allowed)"
    )
    level_configs: int = Field(
        3, ge=0, le=16, description="configs also trained below the top rung for the level at T (fewer than 2: none)"
    )
    level_share: float = Field(
        0.05, ge=0.0, le=10.0, allow_inf_nan=False, description="most the level may cost, as a share of the trials'"
    )
    min_tokens_per_param: float | None = Field(
        DEFAULT_MIN_TOKENS_PER_PARAM,
        gt=0,
        allow_inf_nan=False,
        description="configs seeing fewer tokens per parameter at T are not trained (None: no bound)",
    )
    max_tokens_per_param: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="configs seeing more tokens per parameter at T are not trained"
    )

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as err:
            raise BudgetError(budget_error_message(err)) from None

    @model_validator(mode="before")
    @classmethod
    def _default_trials(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("trials") is None and data.get("search_flops") is None:
            return {**data, "trials": DEFAULT_TRIALS}
        return data

    @model_validator(mode="after")
    def _check(self) -> Budget:
        if self.trials is not None and self.search_flops is not None:
            raise ValueError(
                f"--trials / --search-flops: give one of them, not both "
                f"(got --trials {self.trials} and --search-flops {_num(self.search_flops)})"
            )
        if self.search_flops is not None and self.search_flops < self.trial_flops:
            raise ValueError(
                f"--search-flops: {_num(self.search_flops)} is below --trial-flops "
                f"{_num(self.trial_flops)}: not even one trial"
            )
        low, high = self.min_tokens_per_param, self.max_tokens_per_param
        if low is not None and high is not None and high < low:
            raise ValueError(
                f"--max-tokens-per-param: {high:g} is below --min-tokens-per-param {low:g}: no config can be trained"
            )
        ladder = self.ladder
        if self.anchor_flops is not None and self.anchor_flops > ladder.target_flops * (1 + 1e-9):
            raise ValueError(
                f"--anchor-flops: {_num(self.anchor_flops)} is above the target {_num(ladder.target_flops)}: an "
                "anchor is at most the pretraining run itself"
            )
        if ladder.target_flops <= ladder.top_flops:
            raise ValueError(
                f"--target-flops: {_num(ladder.target_flops)} must be above the top rung "
                f"{_num(ladder.top_flops)} (--trial-flops x --eta^(--rungs - 1)): the search predicts beyond it"
            )
        return self

    @property
    def ladder(self) -> SearchLadder:
        """The ladder the trials climb, resolved from what was asked (`workers.ladder.search_ladder`)."""
        return resolve_ladder(
            self.trial_flops,
            RungSpacing(rungs=self.rungs, eta=self.eta),
            self.ladder_kind,
            self.narrowing,
            target_flops=self.target_flops,
            as_asked=self.layout == "as_given",
        )

    def anchor_plan(self, trials: int | None = None) -> AnchorPlan:
        """The anchors the search trains after its `trials` (default: all of them) at the chosen layout."""
        n = trials if trials is not None else self.n_trials
        return self.ladder.anchor_plan(n, self.anchors, self.anchor_share, self.anchor_flops)

    def level_plan(self, trials: int | None = None) -> LevelPlan:
        """The level configs the search measures after its `trials` (default: all of them)."""
        n = trials if trials is not None else self.n_trials
        return self.ladder.level_plan(n, self.level_configs, self.level_share)

    @property
    def beyond_validated(self) -> str | None:
        """A one-line warning when T is further above the top rung than `make fidelity` has checked."""
        ladder = self.ladder
        if ladder.target_ratio <= VALIDATED_TARGET_RATIO * (1 + 1e-9):
            return None
        return (
            f"--target-flops {_num(ladder.target_flops)} is {ladder.target_ratio:.3g}x the top rung "
            f"{_num(ladder.top_flops)}: predictions were checked up to {VALIDATED_TARGET_RATIO:g}x (make fidelity); "
            "trust the ranking at T less"
        )

    @property
    def n_trials(self) -> int:
        """`trials`, or floor(search_flops / trial_flops)."""
        if self.trials is not None:
            return self.trials
        assert self.search_flops is not None  # validation: either trials or search_flops
        return math.floor(self.search_flops / self.trial_flops)  # >= 1: validation checked search >= trial

    @property
    def total_flops(self) -> float:
        """n_trials x trial_flops: the lowest rungs of all trials. Promoted trials spend more (a trial that
        climbs the whole ladder trains eta^(rungs - 1) x trial_flops, plus its cooldown branches)."""
        return self.n_trials * self.trial_flops


def stored_budget(raw: dict) -> Budget:
    """The Budget a search was stored with, its stored format brought up to date
    (`nas.store.migrations.upgrade_budget`)."""
    from ..store.migrations import upgrade_budget

    return Budget(**upgrade_budget(raw))


def space_batch_size(space: SearchSpace) -> int:
    """The batch size a space trains with: fixed, the smallest searched one, or RunConfig's default."""
    if "batch_size" in space.fixed:
        return int(space.fixed["batch_size"])
    p = space.params.get("batch_size")
    if p is not None:
        if isinstance(p, CategoricalParam):
            return min(int(c) for c in p.choices if c is not None)
        return int(p.low)
    return RunConfig.model_fields["batch_size"].default


def _step_cost(arch: ArchConfig, batch_size: int) -> str:
    per_token = flops_per_token(arch).executed
    tokens = batch_size * arch.seq_len
    return (
        f"{_num(training_flops(arch, tokens))} FLOPs = 3 x {_num(per_token)} FLOPs/token "
        f"x {tokens} tokens ({batch_size} x {arch.seq_len})"
    )


def check_budget_fits(space: SearchSpace, budget: Budget, batch_size: int | None = None) -> BudgetPlan:
    """Raise BudgetError if even the cheapest config of `space` cannot afford one training step, or sees fewer
    tokens per parameter at T than `--min-tokens-per-param`.

    `batch_size` defaults to the space's (`space_batch_size`). Returns the cheapest config's plan.
    """
    batch = batch_size if batch_size is not None else space_batch_size(space)
    cheapest = cheapest_of(space)
    try:
        plan = plan_budget(cheapest, budget.trial_flops, batch)
    except InfeasibleBudget:
        raise BudgetError(
            f"--trial-flops {_num(budget.trial_flops)} is below the cheapest config in the space "
            f"(needs >= {_step_cost(cheapest, batch)} for one training step of {describe(cheapest)})"
        ) from None
    seen = tokens_per_param_at_target(cheapest, budget, batch)
    if seen is not None and seen.below:
        raise BudgetError(
            f"--min-tokens-per-param {budget.min_tokens_per_param:g}: even the cheapest config of the space "
            f"({describe(cheapest)}) sees {seen.ratio:.3g} tokens per parameter at T = {_num(seen.target_flops)}: "
            "lower the bound or raise --target-flops"
        )
    return plan


@dataclass(frozen=True)
class TokensPerParam:
    """The tokens per parameter a config sees at T (None: one step at T is beyond its budget), against the
    budget's range [low, high] (either bound None: none)."""

    ratio: float | None
    target_flops: float
    low: float | None
    high: float | None

    @property
    def below(self) -> bool:
        return self.ratio is not None and self.low is not None and self.ratio < self.low

    @property
    def above(self) -> bool:
        return self.ratio is not None and self.high is not None and self.ratio > self.high

    @property
    def reason(self) -> str | None:
        """Why the config is outside the range, or None."""
        at = f"T = {_num(self.target_flops)}"
        if self.ratio is None:
            return f"one step at the target {_num(self.target_flops)} is beyond its budget"
        if self.below:
            return f"{self.ratio:.3g} tokens per parameter at {at}, below --min-tokens-per-param {self.low:g}"
        if self.above:
            return f"{self.ratio:.3g} tokens per parameter at {at}, above --max-tokens-per-param {self.high:g}"
        return None


def tokens_per_param_at_target(arch: ArchConfig, budget: Budget, batch_size: int) -> TokensPerParam | None:
    """What `arch` sees at T against the budget's tokens-per-parameter range (None: the budget sets no range)."""
    low, high = budget.min_tokens_per_param, budget.max_tokens_per_param
    if low is None and high is None:
        return None
    target = budget.ladder.target_flops
    try:
        ratio: float | None = target_path(arch, target, batch_size).tokens_per_param
    except InfeasibleBudget:
        ratio = None
    return TokensPerParam(ratio, target, low, high)


def trial_is_feasible(arch: ArchConfig, budget: Budget | float, batch_size: int) -> str | None:
    """None if `arch` can afford at least one training step of the per-trial budget and (with a Budget) sees a
    number of tokens per parameter at T within its range, else why not. On a replica ladder the lowest rung
    trains a narrower replica: it is that replica which must afford a step."""
    if isinstance(budget, Budget):
        seen = tokens_per_param_at_target(arch, budget, batch_size)
        if seen is not None and seen.reason is not None:
            return seen.reason
    flops = budget.trial_flops if isinstance(budget, Budget) else float(budget)
    if isinstance(budget, Budget) and budget.ladder.is_replica:
        ladder = budget.ladder
        flops = ladder.layout.lowest_flops  # the lowest rung the search trains
        try:
            plan_replica(arch, ladder.target_flops, 0, flops, batch_size, ladder.narrowing)
        except InfeasibleBudget as err:
            return f"the lowest rung's replica cannot afford one step: {err}"
        return None
    try:
        plan_budget(arch, flops, batch_size)
    except InfeasibleBudget:
        return f"one training step needs {_step_cost(arch, batch_size)} > --trial-flops {_num(flops)}"
    return None
