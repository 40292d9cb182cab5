"""Tokens/s and share of the matmul peak across the search space's sizes, CPU path before and after.

    python benchmarks/small_configs.py --out benchmarks/results/small_configs.json   # ~3 min here

Small configurations win most low-budget searches and use the machine worst: per-step overhead
(many small elementwise ops, autograd bookkeeping) weighs more against small matmuls. For each
size of the default space's range (`cascaded` and `nag` at 2 layers d 64 up to 8 layers d 192;
seq 128, batch 16, as a proxy trial), one run times the training step (forward + backward + AdamW,
2 torch threads) on two paths of the fused ops' CPU implementation, interleaved so machine noise
hits both alike:

- `previous`: autograd through `add_rmsnorm_reference`, as every CPU trial ran before its backward
  was written out, and torch's per-tensor AdamW loop;
- `current`: the op as dispatched now (`_AddRMSNormEager`: about 30% less time per call at the bench
  size) and the fused AdamW step `workers.train.build_optimizer` takes (0.4-0.5x the loop's time).
  NAG uses no RMSNorm, so its speed-up is the optimiser's alone.

Both compute identical forward values and the same update to rounding (tested). Reported per size
and path: median step time, tokens/s, achieved GFLOP/s (3 x executed forward FLOPs per token) and
its share of the measured fp32 matmul peak, and the speed-up current / previous.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from cpu_throughput import BATCH, SIZE, machine_info, make_step, matmul_peak_gflops
from search_spaces.residual_lm import ArchConfig, build_model, training_flops
from search_spaces.residual_lm.ops import add_rmsnorm as add_rmsnorm_module

SIZES = [(2, 64), (4, 64), (2, 128), (4, 128), (4, 192), (8, 192)]  # (n_layers, d_model)
FAMILIES = ("cascaded", "nag")
FIXED = dict(vocab_size=SIZE["vocab_size"], seq_len=SIZE["seq_len"], n_heads=2)  # cpu_throughput's step and batch


@contextlib.contextmanager
def previous_path() -> Iterator[None]:
    """The CPU ops as they were: autograd through the references."""

    def add_rmsnorm_previous(x, delta, weight, eps):
        z, h = add_rmsnorm_module.add_rmsnorm_reference(x, delta, weight, eps)
        return h if delta is None else (z, h)

    eager_apply = add_rmsnorm_module._AddRMSNormEager.apply
    add_rmsnorm_module._AddRMSNormEager.apply = add_rmsnorm_previous  # type: ignore[method-assign]
    try:
        yield
    finally:
        add_rmsnorm_module._AddRMSNormEager.apply = eager_apply  # type: ignore[method-assign]


def measure(rounds: int, per_round: int) -> dict:
    torch.set_num_threads(2)
    peak = matmul_peak_gflops()["gflops"]
    cases = {}
    for family in FAMILIES:
        for n_layers, d in SIZES:
            cfg = ArchConfig(**FIXED, residual=family, n_layers=n_layers, d_model=d)
            torch.manual_seed(0)
            model = build_model(cfg).train()
            steps = {"previous": make_step(model, fused_optimizer=False), "current": make_step(model)}
            cases[f"{family}_L{n_layers}_d{d}"] = (cfg, steps)
    times: dict[tuple[str, str], list[float]] = {(name, p): [] for name in cases for p in ("previous", "current")}
    for _ in range(rounds + 1):  # the first round warms up and is dropped
        for name, (_, steps) in cases.items():
            for path, step in steps.items():
                with previous_path() if path == "previous" else contextlib.nullcontext():
                    start = time.perf_counter()
                    for _ in range(per_round):
                        step()
                    times[(name, path)].append((time.perf_counter() - start) / per_round)
    rows = {}
    for name, (cfg, _) in cases.items():
        flops = training_flops(cfg, BATCH * cfg.seq_len)
        row = {"n_layers": cfg.n_layers, "d_model": cfg.d_model, "residual": cfg.residual}
        for path in ("previous", "current"):
            median = statistics.median(times[(name, path)][1:])
            row[path] = {
                "median_step_s": median,
                "tokens_per_s": BATCH * cfg.seq_len / median,
                "gflops": flops / median / 1e9,
                "share_of_peak": flops / median / 1e9 / peak,
            }
        row["speedup"] = row["previous"]["median_step_s"] / row["current"]["median_step_s"]
        rows[name] = row
    return {"matmul_peak_gflops": peak, "configs": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/small_configs.json"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=3)
    args = parser.parse_args()
    result = {"machine": machine_info(), "batch": BATCH, **FIXED, **measure(args.rounds, args.per_round)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'config':18s} {'tok/s before':>12s} {'tok/s after':>12s} {'peak before':>11s} {'peak after':>10s} speedup")
    for name, row in result["configs"].items():
        b, a = row["previous"], row["current"]
        print(
            f"{name:18s} {b['tokens_per_s']:12.0f} {a['tokens_per_s']:12.0f} "
            f"{b['share_of_peak']:11.1%} {a['share_of_peak']:10.1%} {row['speedup']:.3f}"
        )


if __name__ == "__main__":
    main()
