"""Data parallel pretraining under `torchrun`; a no-op for one process.

Detected from `WORLD_SIZE` > 1 (with `RANK`,
`LOCAL_RANK`). Supported: one process per GPU (NCCL) or per CPU process (gloo); every rank builds
the same model from the same seed and trains on its own contiguous 1/N of the training stream; after
each backward pass the gradients are averaged in one all-reduce (in a fixed parameter order, so
every rank applies the same update); after each training forward the MoD router buffers are averaged
(each rank's threshold is a quantile of its own batch: the shared one is their mean, not the quantile
of the pooled batch), and a non-finite output on any rank makes every rank's output NaN, so all
ranks stop as `diverged` together. `batch_size` is per process: the global batch is N x batch_size
(the proxy searched its learning rate at the export's batch size). The token/FLOP budget is global
(each rank gets 1/N of it). Each rank checkpoints its own data position and RNG (rank 0 in out_dir,
rank r in out_dir/rank<r>); resuming needs the same N, and all ranks' checkpoints at the same step.
Every rank evaluates the whole validation set (identical models, identical result).
Not supported: resuming with a different N, sharding the model (FSDP/tensor parallel), gradient
accumulation, or overlapping the all-reduce with the backward pass (DDP's bucketing). Only the
single-process path and gloo on CPU are tested here.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist

from search_spaces.residual_lm import ResidualLM

from ..data.corpus import TokenizedCorpus
from ..training.records import CurvePoint
from ..training.train import Report

__all__ = ["DataParallelError", "Parallel"]


class DataParallelError(ValueError):
    """A torchrun job whose ranks cannot run together (one line)."""


@dataclass
class Parallel:
    """This process's place in a torchrun job (rank 0 of 1 without torchrun). See the module docstring."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    owns_group: bool = False  # this module initialised the process group (and destroys it)

    @classmethod
    def from_env(cls) -> Parallel:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls()
        if "RANK" not in os.environ:
            raise DataParallelError(f"WORLD_SIZE={world} but RANK is not set: launch data parallel runs with torchrun")
        rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        owns = not dist.is_initialized()
        if owns:
            if torch.cuda.is_available():
                torch.cuda.set_device(local)
            dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        return cls(rank, world, local, owns)

    def close(self) -> None:
        if self.owns_group and dist.is_initialized():
            dist.barrier()  # no rank tears gloo down while another still talks to it (seen: abort at exit)
            dist.destroy_process_group()

    def device(self) -> torch.device:
        return torch.device("cuda", self.local_rank) if torch.cuda.is_available() else torch.device("cpu")

    def checkpoint_dir(self, out_dir: Path) -> Path:
        return out_dir if self.rank == 0 else out_dir / f"rank{self.rank}"

    def shard(self, corpus: TokenizedCorpus) -> TokenizedCorpus:
        """This rank's contiguous 1/N of the training stream (validation stays whole)."""
        if self.world_size == 1:
            return corpus
        n = corpus.train.numel()
        part = corpus.train[self.rank * n // self.world_size : (self.rank + 1) * n // self.world_size]
        return replace(corpus, train=part, fingerprint=f"{corpus.fingerprint}/shard{self.rank}of{self.world_size}")

    def _all_reduce(self, values: list[float], op=None) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self.device())
        dist.all_reduce(t, op=op or dist.ReduceOp.SUM)
        return t.tolist()

    def sum(self, value: float) -> float:
        return value if self.world_size == 1 else self._all_reduce([value])[0]

    def any(self, flag: bool) -> bool:
        """True on every rank if `flag` is true on any rank."""
        return flag if self.world_size == 1 else self._all_reduce([float(flag)], op=dist.ReduceOp.MAX)[0] > 0

    def agree_on_step(self, step: int) -> int:
        """Every rank must resume from the same step; DataParallelError on all ranks otherwise."""
        if self.world_size == 1:
            return step
        low, high = self._all_reduce([-step, step], op=dist.ReduceOp.MAX)
        if -low != high:
            raise DataParallelError(f"ranks' checkpoints are at steps {-low:.0f}..{high:.0f}: cannot resume together")
        return step

    def report(self, report: Report | None) -> Report | None:
        """Rank 0 reports; a stop asked there stops every rank at the same step."""
        if self.world_size == 1:
            return report

        def every_rank(point: CurvePoint) -> bool:
            stop = bool(report(point)) if report is not None and self.rank == 0 else False
            return self._all_reduce([float(stop)], op=dist.ReduceOp.MAX)[0] > 0

        return every_rank

    def attach(self, model: ResidualLM) -> None:
        """Average gradients at the end of each backward, router buffers after each training forward.

        The gradient all-reduce runs once per backward pass, queued on the autograd engine from a
        hook on the logits (which every backward starts from), over all trainable parameters in a
        fixed order. A parameter can miss its gradient on one rank (a routed sublayer that executed
        no token there): it counts as zero there, and stays None only if no rank used it.
        """
        params = [p for p in model.parameters() if p.requires_grad]

        def average_gradients() -> None:
            used = [p.grad is not None for p in params]
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            flags = torch.tensor(used, dtype=torch.float32, device=grads[0].device)
            flat = torch.cat([g.reshape(-1).float() for g in grads] + [flags])
            dist.all_reduce(flat)
            offset = 0
            for p, g, n_used in zip(params, grads, flat[-len(params) :].tolist(), strict=False):
                p.grad = g.copy_(flat[offset : offset + g.numel()].view_as(g) / self.world_size) if n_used else None
                offset += g.numel()

        def sync_after_forward(module, _args, output: torch.Tensor):
            if not module.training:
                return output
            buffers = [b for r in module.routers().values() for b in (r.threshold, r.level, r.eval_threshold)]
            flat = torch.stack([b.float() for b in buffers] + [(~torch.isfinite(output).all()).float()])
            dist.all_reduce(flat)
            for b, v in zip(buffers, flat[:-1] / self.world_size, strict=False):
                b.copy_(v)
            if flat[-1] > 0:  # non-finite somewhere: every rank sees NaN and ends the run as diverged
                output = output * math.nan
            if output.requires_grad:
                output.register_hook(
                    lambda grad: torch.autograd.Variable._execution_engine.queue_callback(average_gradients)
                )
            return output

        model.register_forward_hook(sync_after_forward)
