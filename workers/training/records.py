"""What a training run reports, typed: a point of its loss curve (`CurvePoint`) and a measured rung (`RungRecord`).

Both are frozen dataclasses of plain numbers, so a record crosses a process (Ray pickles it), a checkpoint (as
`dataclasses.asdict`, rebuilt by `from_dict`) and the store (one column per field, `nas.store.schema`) unchanged.
A new field is added here once; the store's column list follows from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CurvePoint", "RungRecord"]


@dataclass(frozen=True)
class CurvePoint:
    """One point of a run's loss curve, after `step` optimisation steps: the tokens and training FLOPs spent so far,
    the smoothed training loss, the learning rate of the step just taken and the run's planned steps. At a
    validation point, `val_loss` and `eval_index` k of `evals` (validations sit at fixed shares of each run's own
    budget, so runs of different lengths compare point for point); elsewhere those three are None."""

    step: int
    tokens: int
    train_loss: float
    training_flops: float
    lr: float
    planned_steps: int
    val_loss: float | None = None
    eval_index: int | None = None
    evals: int | None = None

    @property
    def evaluated(self) -> bool:
        """Whether the run validated at this point."""
        return self.eval_index is not None

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> CurvePoint:
        """The point `dataclasses.asdict` gave (a checkpoint's)."""
        return cls(**values)


@dataclass(frozen=True)
class RungRecord:
    """One measured rung of a trial: rung `rung` at training budget `budget_flops`, run with `seed`, trained `steps`
    steps on `tokens` tokens for `training_flops` FLOPs in `train_seconds` of training, its validation loss after
    its cooldown `val_loss` (nats per token; inf when the cooldown diverged).

    On a budget ladder (the config itself, branched at each rung) the replica fields are None. A replica rung
    (`workers.trial.replica`) trains a narrower copy of the target: its width `d_model`, its parameters `params`,
    the tokens per parameter it saw (`tokens_per_param`) against the target's at T (`target_tokens_per_param`),
    and whether it is on the target's tokens-per-parameter path (`on_path`; False: the narrowest width, fewer
    tokens per parameter)."""

    rung: int
    seed: int
    budget_flops: float
    steps: int
    tokens: int
    val_loss: float
    training_flops: float
    train_seconds: float | None = None
    d_model: int | None = None
    params: int | None = None
    tokens_per_param: float | None = None
    target_tokens_per_param: float | None = None
    on_path: bool | None = None

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RungRecord:
        """The record `dataclasses.asdict` gave (a checkpoint's, a spooled result's)."""
        return cls(**values)
