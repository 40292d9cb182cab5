"""Checkpoints of a training run: what a run accumulates (`TrainState`), and saving and restoring it with the
model, the optimiser, the batch stream and the RNG, so a resumed run continues bit for bit."""

from __future__ import annotations

import errno
import math
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from pydantic import BaseModel

from search_spaces.residual_lm import ArchConfig

from .records import CurvePoint, RungRecord


@dataclass
class TrainState:
    """Everything a run accumulates; saved in checkpoints as plain types (`state_dict`, `from_state_dict`)."""

    step: int = 0
    tokens_seen: int = 0
    training_flops: float = 0.0
    train_loss: float = math.nan
    val_loss: float = math.nan
    curve: list[CurvePoint] = field(default_factory=list)
    step_seconds: float = 0.0  # inside schedule/forward/backward/optimizer only
    rungs: list[RungRecord] = field(default_factory=list)  # one per rung measured (ladder runs)
    branch_flops: float = 0.0  # training FLOPs spent in cooldown branches (ladder runs), beside the main run's

    def state_dict(self) -> dict:
        """Plain numbers, lists and dicts: what `torch.load(weights_only=True)` reads back."""
        return {**vars(self), "curve": [asdict(p) for p in self.curve], "rungs": [asdict(r) for r in self.rungs]}

    @classmethod
    def from_state_dict(cls, state: dict) -> TrainState:
        curve = [CurvePoint.from_dict(p) for p in state["curve"]]
        return cls(**{**state, "curve": curve, "rungs": [RungRecord.from_dict(r) for r in state["rungs"]]})


def save_checkpoint(path: Path, cfg: ArchConfig, optim: BaseModel, model, opt, batches, state: TrainState) -> None:
    """The run at `state.step`: configs as plain dicts (never pickled objects), the model's and the optimiser's
    state, the batch stream's position and the RNG; written atomically. A full disk raises ENOSPC, saying so,
    and leaves the last complete checkpoint as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "arch": cfg.model_dump(),
        "optim": optim.model_dump(),
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "batches": batches.state_dict(),
        "rng": torch.get_rng_state(),
        "state": state.state_dict(),
    }
    tmp = path.with_suffix(".tmp")
    try:
        torch.save(payload, tmp)
    except (OSError, RuntimeError) as err:
        tmp.unlink(missing_ok=True)  # the last complete checkpoint stays as it was
        free = shutil.disk_usage(path.parent).free
        # torch's zip writer reports a full disk as a RuntimeError that does not say so: the free space does
        if (isinstance(err, OSError) and err.errno == errno.ENOSPC) or free < checkpoint_bytes(payload):
            message = f"No space left on device writing checkpoint {path} ({free} bytes free)"
            raise OSError(errno.ENOSPC, message) from err
        raise
    tmp.replace(path)


def checkpoint_bytes(payload: dict) -> int:
    """Bytes of the tensors in a checkpoint payload: about what writing it needs on disk."""
    tensors = [*payload["model"].values(), *_tensors(payload["optimizer"])]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def _tensors(tree) -> list:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        return [t for v in tree.values() for t in _tensors(v)]
    if isinstance(tree, (list, tuple)):
        return [t for v in tree for t in _tensors(v)]
    return []


def load_checkpoint(path: Path, cfg: ArchConfig, model, opt, batches) -> TrainState:
    """Restore a run from `path` into the model, optimiser and batch stream; refused if its architecture differs."""
    payload = torch.load(path, weights_only=True)
    if payload["arch"] != cfg.model_dump():
        raise ValueError(f"checkpoint {path}: architecture differs from the requested one")
    model.load_state_dict(payload["model"])
    opt.load_state_dict(payload["optimizer"])
    batches.load_state_dict(payload["batches"])
    torch.set_rng_state(payload["rng"])
    return TrainState.from_state_dict(payload["state"])
