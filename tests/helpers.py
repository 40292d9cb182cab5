"""Small configurations, deterministic inputs, warmed models, measured rungs and a script runner shared by the tests."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import torch

from search_spaces.residual_lm import ArchConfig, build_model, flavour
from workers.training.records import RungRecord

FAMILIES = ("cascaded", "nag", "ancre")
ROOT = Path(__file__).resolve().parents[1]


def run_script(*args: str, cwd: Path = ROOT, env: dict | None = None, timeout: int = 300) -> None:
    """`python *args` in a subprocess (`-m benchmarks.<name> ...`, say); raises with its output if it fails."""
    subprocess.run([sys.executable, *args], cwd=cwd, check=True, capture_output=True, timeout=timeout, env=env)


BENCHMARK_ROOMS = ("", "trust.", "speed.", "service.", "claims.", "corpora.")  # benchmarks/ and its folders


def import_benchmark(name: str) -> ModuleType:
    """The benchmark module `name`, in benchmarks/ or the folder of it that holds it (the repository root is on
    `sys.path` under `python -m pytest`)."""
    for room in BENCHMARK_ROOMS:
        if importlib.util.find_spec(f"benchmarks.{room}{name}") is not None:
            return importlib.import_module(f"benchmarks.{room}{name}")
    raise ModuleNotFoundError(f"no benchmark module {name!r} in benchmarks/")


def small_cfg(**overrides) -> ArchConfig:
    return flavour("debug", **overrides)


def tokens(cfg: ArchConfig, batch: int = 4, seq_len: int | None = None, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (batch, seq_len or cfg.seq_len), generator=gen)


def warmed_model(cfg: ArchConfig, batches: int = 30, batch: int = 8):
    """A model whose MoD thresholds have been warmed on random batches (weights untouched), in eval mode."""
    model = build_model(cfg)
    model.train()
    with torch.no_grad():
        for i in range(batches):
            model(tokens(cfg, batch, seed=1000 + i))
    return model.eval()


def measured_rung(rung: int, loss: float, budget_flops: float, seed: int = 0, **replica) -> RungRecord:
    """A rung that measured `loss` at `budget_flops` with `seed` (one step of one token: what a test of the answer
    reads), with a replica rung's fields if given."""
    return RungRecord(rung, seed, budget_flops, 1, 1, loss, budget_flops, **replica)
