"""fp32 versus bf16 autocast on this machine: step time and loss, side by side in one run.

The proxy trainer's default precision is chosen by these numbers (see README). For each residual
family at the benchmark size, the same seeded model and batches are trained for a few steps in
fp32 and under bf16 autocast, interleaved; the JSON holds median step times, their ratio and the
loss gap after the same steps.

    python -m benchmarks.speed.precision --out benchmarks/results/precision.json
"""

from __future__ import annotations

import argparse
import logging
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.harness import BATCH, FAMILIES, SIZE, machine_info, time_interleaved, write_json
from search_spaces.residual_lm import ArchConfig, build_model

log = logging.getLogger("precision")


WARMUP = 2  # steps per run left out of the times (their losses count)


def make_run(cfg: ArchConfig, bf16: bool, steps: int):
    """A training step of a seeded model on fresh batches (drawn up front, untimed), and its losses so far."""
    torch.manual_seed(0)
    model = build_model(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(0)
    windows = [torch.randint(0, cfg.vocab_size, (BATCH, cfg.seq_len + 1), generator=gen) for _ in range(steps)]
    losses: list[float] = []

    def step() -> None:
        window = windows[len(losses)]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(window[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), window[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())

    return step, losses


def measure(family: str, steps: int) -> dict:
    cfg = ArchConfig(**SIZE, residual=family)
    runs = {name: make_run(cfg, name == "bf16", steps) for name in ("fp32", "bf16")}
    times = time_interleaved({name: step for name, (step, _) in runs.items()}, steps - WARMUP, warmup=WARMUP)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    last = {name: statistics.mean(losses[-5:]) for name, (_, losses) in runs.items()}
    return {
        "median_step_s": med,
        "bf16_over_fp32_step_time": med["bf16"] / med["fp32"],
        "loss_after_steps": last,
        "loss_gap_bf16_minus_fp32": last["bf16"] - last["fp32"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/precision.json"))
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    result = {
        "machine": machine_info(),
        "size": {**SIZE, "batch": BATCH},
        "steps": args.steps,
        "bf16_supported_natively": bool(getattr(torch.backends.mkldnn, "is_available", lambda: False)()),
        "families": {f: measure(f, args.steps) for f in FAMILIES},
    }
    ratios = [r["bf16_over_fp32_step_time"] for r in result["families"].values()]
    result["recommended_default"] = "bf16" if max(ratios) < 0.9 else "fp32"
    write_json(args.out, result)
    for fam, r in result["families"].items():
        log.info(
            "%-9s bf16/fp32 step time %.2f, loss gap %+.4f",
            fam,
            r["bf16_over_fp32_step_time"],
            r["loss_gap_bf16_minus_fp32"],
        )
    log.info("recommended default: %s", result["recommended_default"])


if __name__ == "__main__":
    main()
