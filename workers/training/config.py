"""The settings of a training run, as the search and pretraining give them: the optimiser and its learning-rate
schedule (`OptimConfig`) and how the run is executed (`RunConfig`). Plain values, validated, immutable; the trainer
(`workers.training.train`) reads them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from search_spaces.residual_lm.config import ResidualFamily

from .schedules import ScheduleKind

__all__ = ["OptimConfig", "Precision", "RunConfig"]

Precision = Literal["fp32", "bf16"]


class OptimConfig(BaseModel):
    """The optimiser knobs a search tunes (AdamW) and the learning-rate schedule a run follows
    (`workers.training.schedules`: warmup-stable-decay by default, or cosine)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lr: float = Field(3e-3, gt=0)  # no upper bound: an absurd LR must be runnable (and diverge)
    schedule: ScheduleKind = Field("wsd", description="the learning-rate schedule: warmup-stable-decay or cosine")
    warmup: float = Field(0.1, ge=0, le=0.5, description="share of the (lowest rung's) steps spent warming up")
    cooldown: float = Field(
        0.2, gt=0, le=0.5, description="wsd: share of the run's (of each rung's) last steps spent decaying the LR"
    )
    weight_decay: float = Field(0.1, ge=0, le=1.0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1.0, description="the decay ends at lr * min_lr_ratio")
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    grad_clip: float = Field(1.0, gt=0)
    nag_gate_lr: float = Field(1e-3, gt=0, le=1.0, description="cap on NAG gate and alpha LR (replications)")
    # The horizon rule (docs/design.md §3.7): `lr` is the best rate for a run of `horizon_tokens` tokens;
    # a run of D tokens uses lr (D' / horizon_tokens)^-beta, beta the family's `horizon_exponents` entry
    # (0 when absent) and D' = D clamped to `horizon_span`, the horizons beta was measured over (a power
    # law is not extrapolated). Off (None) by default.
    horizon_tokens: int | None = Field(None, ge=1, description="tokens of the run `lr` was tuned for")
    horizon_exponents: dict[ResidualFamily, Annotated[float, Field(ge=-2.0, le=2.0)]] = Field(
        default_factory=dict, description="beta per family in lr* ~ tokens^-beta (measured: make transfer)"
    )
    horizon_span: tuple[int, int] | None = Field(
        None, description="(shortest, longest) run in tokens the exponents were measured on; None: no clamp"
    )

    @model_validator(mode="after")
    def _span_is_ordered(self) -> OptimConfig:
        if self.horizon_span is not None and not 1 <= self.horizon_span[0] <= self.horizon_span[1]:
            raise ValueError(
                f"horizon_span must be (shortest, longest) with 1 <= shortest <= longest, got {self.horizon_span}"
            )
        return self

    def at_horizon(self, family: ResidualFamily, tokens: int) -> OptimConfig:
        """This config for a run of `tokens` tokens of `family`: the horizon rule applied to `lr` (and
        switched off, so it is never applied twice); itself without a rule."""
        if self.horizon_tokens is None:
            return self
        if self.horizon_span is not None:
            tokens = min(max(tokens, self.horizon_span[0]), self.horizon_span[1])
        beta = self.horizon_exponents.get(family, 0.0)
        lr = self.lr * (tokens / self.horizon_tokens) ** -beta
        return self.model_copy(update={"lr": lr, "horizon_tokens": None})


class RunConfig(BaseModel):
    """How a proxy run is executed: batch, precision, evaluation, reporting, checkpoints."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_size: int = Field(16, ge=1, le=4096)
    precision: Precision = "fp32"  # bf16 autocast saves little on a CPU: benchmarks/results/precision.json
    eval_sequences: int = Field(
        64, ge=2, description="held-out sequences (spread over the held-out text) for val loss and the width probe"
    )
    evals: int = Field(4, ge=1, description="validation passes over the run (the last at the end)")
    report_every: int = Field(10, ge=1, description="steps between progress reports")
    checkpoint_dir: str | None = None
    checkpoint_every: int = Field(0, ge=0, description="steps between checkpoints; 0 = never")
