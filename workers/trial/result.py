"""What one proxy trial measured, typed: `TrialResult`, with its width certificate (`WidthCertificate`), its loss
curve and its rungs (`workers.training.records`). The store writes it field by field (`nas.store`); `to_dict` and
`from_dict` give it as strict JSON and back (the driver's spool keeps results that way while the store is down).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from search_spaces.residual_lm import ArchConfig

from ..status import TrialStatus
from ..training.config import OptimConfig
from ..training.records import CurvePoint, RungRecord

__all__ = ["TrialResult", "WidthCertificate"]


@dataclass(frozen=True)
class WidthCertificate:
    """What a trial stores about its width geometry (docs/design.md §4), all plain Python numbers."""

    n_sequences: int
    d_model: int
    mu_norm: float
    d_par: float
    d_2: float
    d_align: float
    b_exact_8_8: float
    b_align_8_8: float
    p_hat_8_8: float


@dataclass
class TrialResult:
    """One proxy run: its final status and why, what it measured (losses, FLOPs, tokens, time, memory), the configs
    that ran (`arch`, `optim`; None when nothing was built), its curve, its rungs (ladder runs) and its seed."""

    status: TrialStatus  # a final status: completed, diverged, stopped, infeasible or failed
    failure_reason: str | None
    val_loss: float  # nats per token (a ladder's last rung); inf unless completed
    val_bpb: float  # bits per byte of the held-out text (exact; bytes: val_loss / ln 2)
    nominal_flops_per_token: float
    executed_flops_per_token: float  # expected at the target skip rate: the search's objective
    realised_flops_per_token: float | None  # what training batches actually executed
    budget_flops: float
    training_flops: float
    tokens_seen: int
    planned_tokens: int
    steps: int
    wall_time_s: float
    tokens_per_s: float
    step_time_share: float | None  # share of wall time inside forward/backward/optimizer steps
    peak_memory_mb: float
    diagnostics: dict = field(default_factory=dict)  # the model's per-layer diagnostics, a free-form document
    width: WidthCertificate | None = None
    curve: list[CurvePoint] = field(default_factory=list)
    rungs: list[RungRecord] = field(default_factory=list)  # ladder runs: each rung's budget, tokens, loss, FLOPs
    branch_flops: float = 0.0  # ladder runs: training FLOPs of the cooldown branches, beside training_flops
    arch: ArchConfig | None = None
    optim: OptimConfig | None = None
    seed: int = 0

    @classmethod
    def untrained(
        cls, status: TrialStatus, reason: str | None, executed_flops_per_token: float, start: float
    ) -> TrialResult:
        """A config never trained (infeasible, stopped or failed before it started, or an invalid config whose FLOPs
        are inf): no loss, nothing spent since `start` (a `time.perf_counter()`)."""
        return cls(
            status=status,
            failure_reason=reason,
            val_loss=math.inf,
            val_bpb=math.inf,
            nominal_flops_per_token=executed_flops_per_token,
            executed_flops_per_token=executed_flops_per_token,
            realised_flops_per_token=None,
            budget_flops=0.0,
            training_flops=0.0,
            tokens_seen=0,
            planned_tokens=0,
            steps=0,
            wall_time_s=time.perf_counter() - start,
            tokens_per_s=0.0,
            step_time_share=None,
            peak_memory_mb=0.0,
        )

    @classmethod
    def loss_only(cls, val_loss: float, executed_flops_per_token: float) -> TrialResult:
        """A completed result that carries only its loss and FLOPs per token: what a replay of stored losses or a
        stand-in worker (one that trains nothing) reports."""
        untrained = cls.untrained(TrialStatus.COMPLETED, None, executed_flops_per_token, time.perf_counter())
        return replace(untrained, val_loss=val_loss)

    def to_dict(self) -> dict[str, Any]:
        """Plain values: the configs as their dumps, the records as dicts."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["status"] = str(self.status)
        out["width"] = asdict(self.width) if self.width is not None else None
        out["curve"], out["rungs"] = [asdict(p) for p in self.curve], [asdict(r) for r in self.rungs]
        out["arch"] = self.arch.model_dump() if self.arch is not None else None
        out["optim"] = self.optim.model_dump() if self.optim is not None else None
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrialResult:
        """The result `to_dict` gave."""
        width, arch, optim = values["width"], values["arch"], values["optim"]
        return cls(
            **{
                **values,
                "status": TrialStatus(values["status"]),
                "width": WidthCertificate(**width) if width is not None else None,
                "curve": [CurvePoint.from_dict(p) for p in values["curve"]],
                "rungs": [RungRecord.from_dict(r) for r in values["rungs"]],
                "arch": ArchConfig.model_validate(arch) if arch is not None else None,
                "optim": OptimConfig.model_validate(optim) if optim is not None else None,
            }
        )
