"""Compute budgets of a search (docs/design.md §3.6): every trial gets the same training FLOPs.

`Budget` holds what the user gives on the command line: `--trial-flops` (C, the iso-FLOP budget every
trial gets: the lowest rung of its budget ladder) and either `--trials` or `--search-flops`
(C x trials; the number of trials is then floor(search / trial)), plus optional wall-clock caps.
The ladder has `--rungs` budgets C, eta C, eta^2 C, ... (`--eta`; the defaults are the fields `rungs` and `eta`);
promoted trials climb it. `--ladder` says what a rung trains: `replica` (default) a width-shrunk replica of the trial's
architecture at the target's tokens per parameter (`workers.trial.replica`), `budget` the architecture itself
on one warmup-stable-decay run (`workers.training.plans`). `--target-flops` T is the training compute the user
plans to pretrain with, the budget the search answers for: its default is `VALIDATED_TARGET_RATIO` (10)
x the top rung, the furthest `make fidelity` has checked a prediction (a search may ask for more and is
told it is beyond that). Bad values raise `BudgetError` with one line naming the CLI option, e.g.
`--trial-flops: must be > 0 (got -1.0)`.

`check_budget_fits` rejects, before anything runs, a trial budget below one training step of the
cheapest architecture of the space, or a space whose cheapest architecture would see fewer tokens per
parameter at T than `--min-tokens-per-param`; `trial_is_feasible` gives the reason one sampled
architecture cannot afford a step or lies outside that range at T (the search records such a trial as
infeasible without training it: the answer at T is where pretraining is plausible).
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from search_spaces.residual_lm import ArchConfig, flops_per_token, training_flops
from workers.training.config import RunConfig
from workers.training.plans import BudgetPlan, InfeasibleBudget, LadderConfig, plan_budget
from workers.trial.contract import Measurement
from workers.trial.narrowing import DEFAULT_MIN_WIDTH, KEEP_HEADS, Keep, Narrowing
from workers.trial.replica_plan import plan_replica, rung_budgets, target_path

from . import CategoricalParam, SearchSpace, cheapest_of, describe
from .layout import AnchorPlan, Layout, choose_layout, plan_anchors
from .messages import options_message

__all__ = [
    "DEFAULT_MIN_TOKENS_PER_PARAM",
    "DEFAULT_TRIALS",
    "VALIDATED_TARGET_RATIO",
    "Budget",
    "BudgetError",
    "budget_error_message",
    "check_budget_fits",
    "space_batch_size",
    "stored_budget",
    "tokens_per_param_reason",
    "trial_is_feasible",
]

DEFAULT_TRIALS = 20  # when neither --trials nor --search-flops is given
# A config trained at T on fewer tokens per parameter than this is far from compute-optimal (Chinchilla's ratio
# is ~20; small models are best at more): its answer at T is not plausible, so a search does not spend a trial on
# it. On `make fidelity`'s truths no config below it ranked in the better half (benchmarks/README.md).
DEFAULT_MIN_TOKENS_PER_PARAM = 4.0
VALIDATED_TARGET_RATIO = 10.0  # T / top rung checked by `make fidelity`; the default --target-flops
LEGACY_TARGET_RATIO = 1000.0  # T / C of a search stored without a ladder kind and without --target-flops
Ladder = Literal["replica", "budget"]
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
    return options_message(err) if isinstance(err, ValidationError) else str(err)


class Budget(BaseModel):
    """Per-trial training FLOPs, how many trials (or the whole search's FLOPs), optional time caps.

    `Budget(...)` raises BudgetError (one line); `Budget.model_validate` raises pydantic's
    ValidationError, which `budget_error_message` turns into the same line.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

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
    ladder: Ladder = Field("replica", description="what a rung trains: a replica on the target's path, or the config")
    min_replica_width: int = Field(
        DEFAULT_MIN_WIDTH, ge=2, le=65536, description="narrowest replica: a rung needing less trains it off the path"
    )
    narrowing: Keep = Field(
        Narrowing.model_fields["keep"].default, description="what a replica keeps: the head size or the head count"
    )
    min_replica_share: float = Field(
        Narrowing.model_fields["min_share"].default,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="narrowest replica as a share of the target's width",
    )
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
        if self.anchor_flops is not None and self.anchor_flops > self.target * (1 + 1e-9):
            raise ValueError(
                f"--anchor-flops: {_num(self.anchor_flops)} is above the target {_num(self.target)}: an anchor is at "
                "most the pretraining run itself"
            )
        if self.target <= self.top_rung_flops:
            raise ValueError(
                f"--target-flops: {_num(self.target)} must be above the top rung "
                f"{_num(self.top_rung_flops)} (--trial-flops x --eta^(--rungs - 1)): the search predicts beyond it"
            )
        return self

    @property
    def ladder_config(self) -> LadderConfig:
        return LadderConfig(rungs=self.rungs, eta=self.eta)

    @property
    def chosen_layout(self) -> Layout:
        """The rungs the search trains (`nas.space.layout.choose_layout`): the ladder asked for, or every config
        once at its top rung where a replica ladder would save no compute."""
        return choose_layout(
            self.trial_flops, self.rungs, self.eta, self.ladder == "replica", given=self.layout == "as_given"
        )

    def anchor_plan(self, trials: int | None = None) -> AnchorPlan:
        """The anchors the search trains after its `trials` (default: all of them) at the chosen layout."""
        layout = self.chosen_layout
        cost = (trials if trials is not None else self.n_trials) * layout.cost_per_config(self.ladder == "replica")
        return plan_anchors(cost, layout.top_flops, self.target, self.anchors, self.anchor_share, self.anchor_flops)

    def measurement(self) -> Measurement:
        """How each trial of the search is measured: replica rungs on the target's path as the chosen layout lays
        them out (`chosen_layout`: its rungs C eta^r, or the top rung alone), the config on a budget ladder up to the
        top rung, or (one rung asked for) the config at the trial budget."""
        if self.rungs < 2:
            return Measurement(self.top_rung_flops, target_flops=self.target)
        if self.ladder != "replica":
            return Measurement(self.top_rung_flops, self.ladder_config, (), self.target, self.replica_narrowing)
        layout = self.chosen_layout
        ladder = LadderConfig(rungs=layout.rungs, eta=layout.eta)
        replicas = tuple(rung_budgets(layout.lowest_flops, ladder))
        return Measurement(layout.top_flops, ladder, replicas, self.target, self.replica_narrowing)

    @property
    def replica_narrowing(self) -> Narrowing:
        """How replica rungs narrow the target (`workers.trial.narrowing`)."""
        return Narrowing(min_width=self.min_replica_width, min_share=self.min_replica_share, keep=self.narrowing)

    @property
    def top_rung_flops(self) -> float:
        """The budget of the top rung: trial_flops x eta^(rungs - 1)."""
        return self.trial_flops * self.eta ** (self.rungs - 1)

    @property
    def target(self) -> float:
        """`target_flops`, or VALIDATED_TARGET_RATIO x the top rung."""
        return self.target_flops if self.target_flops is not None else VALIDATED_TARGET_RATIO * self.top_rung_flops

    @property
    def target_ratio(self) -> float:
        """T over the top rung: how far the search extrapolates."""
        return self.target / self.top_rung_flops

    @property
    def beyond_validated(self) -> str | None:
        """A one-line warning when T is further above the top rung than `make fidelity` has checked."""
        if self.target_ratio <= VALIDATED_TARGET_RATIO * (1 + 1e-9):
            return None
        return (
            f"--target-flops {_num(self.target)} is {self.target_ratio:.3g}x the top rung {_num(self.top_rung_flops)}: "
            f"predictions were checked up to {VALIDATED_TARGET_RATIO:g}x (make fidelity); trust the ranking at T less"
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
    """The Budget a search was stored with. A search stored before budget ladders had a single budget; one
    stored before replica rungs ran the budget ladder, and its default target was LEGACY_TARGET_RATIO x C."""
    if "ladder" not in raw:
        target = raw.get("target_flops") or LEGACY_TARGET_RATIO * raw["trial_flops"]
        raw = {**raw, "ladder": "budget", "target_flops": target}
    if "narrowing" not in raw:  # stored before the head size was kept: its replicas kept the head count
        raw = {**raw, "narrowing": KEEP_HEADS.keep, "min_replica_share": KEEP_HEADS.min_share}
    if "anchors" not in raw:  # stored before anchors, the layout rule and the bias prior: its answer as it was
        raw = {**raw, "anchors": 0, "layout": "as_given", "bias_prior": "none"}
    if "min_tokens_per_param" not in raw:  # stored before the bound: it trained every config it sampled
        raw = {**raw, "min_tokens_per_param": None}
    return Budget(**{"rungs": 1, **raw})


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
    """Raise BudgetError if even the cheapest config of `space` cannot afford one training step.

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
    low = budget.min_tokens_per_param
    if low is not None and (reason := tokens_per_param_reason(cheapest, budget, batch)) and "below" in reason:
        raise BudgetError(
            f"--min-tokens-per-param {low:g}: even the cheapest config of the space ({describe(cheapest)}) sees "
            f"{reason.split(' tokens')[0]} tokens per parameter at T = {_num(budget.target)}: lower the bound or "
            "raise --target-flops"
        )
    return plan


def tokens_per_param_reason(arch: ArchConfig, budget: Budget, batch_size: int) -> str | None:
    """Why `arch` is outside the budget's tokens-per-parameter range at the target T, or None."""
    low, high = budget.min_tokens_per_param, budget.max_tokens_per_param
    if low is None and high is None:
        return None
    try:
        ratio = target_path(arch, budget.target, batch_size).tokens_per_param
    except InfeasibleBudget:
        return f"one step at the target {_num(budget.target)} is beyond its budget"
    if low is not None and ratio < low:
        return f"{ratio:.3g} tokens per parameter at T = {_num(budget.target)}, below --min-tokens-per-param {low:g}"
    if high is not None and ratio > high:
        return f"{ratio:.3g} tokens per parameter at T = {_num(budget.target)}, above --max-tokens-per-param {high:g}"
    return None


def trial_is_feasible(arch: ArchConfig, budget: Budget | float, batch_size: int) -> str | None:
    """None if `arch` can afford at least one training step of the per-trial budget and (with a Budget) sees a
    number of tokens per parameter at T within its range, else why not. On a replica ladder the lowest rung
    trains a narrower replica: it is that replica which must afford a step."""
    if isinstance(budget, Budget) and (reason := tokens_per_param_reason(arch, budget, batch_size)):
        return reason
    flops = budget.trial_flops if isinstance(budget, Budget) else float(budget)
    if isinstance(budget, Budget) and budget.ladder == "replica" and budget.rungs > 1:
        flops = budget.chosen_layout.lowest_flops  # the lowest rung the search trains
        try:
            plan_replica(arch, budget.target, 0, flops, batch_size, budget.replica_narrowing)
        except InfeasibleBudget as err:
            return f"the lowest rung's replica cannot afford one step: {err}"
        return None
    try:
        plan_budget(arch, flops, batch_size)
    except InfeasibleBudget:
        return f"one training step needs {_step_cost(arch, batch_size)} > --trial-flops {_num(flops)}"
    return None
