"""torch.compile on the CPU workers: the step it saves against the compile time it costs.

    python -m benchmarks.speed.compile_cpu --out benchmarks/results/compile_cpu.json   # ~2 min here

For each family at the `bench` size (d 128, 4 layers, 4 heads, seq 128, batch 16; dense, as
MoD's token counts change every batch and would recompile), one run builds two copies of the same
model, compiles one (`torch.compile`, Inductor's C++ backend, from an empty cache: every proxy trial
is a new architecture, so a worker compiles cold) and times the training step
(forward + backward + AdamW, 2 threads) of both, interleaved. Reported: compile seconds (the
first compiled step), median step times, their ratio, and the break-even: the steps a run must
take before the compile pays for itself, compile / (eager step - compiled step). A proxy trial
takes a few hundred steps (2e12 FLOPs at this size: about 200), so compiling pays only when the
break-even is well below that; `workers` therefore trains eagerly (see the JSON's `verdict`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

# A fresh Inductor cache per run: each proxy trial is a new architecture, so a worker compiles cold.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="resnas-inductor-")

import torch  # noqa: E402

from benchmarks.harness import BATCH, FAMILIES, machine_info, make_step, time_interleaved, write_json  # noqa: E402
from search_spaces.residual_lm import ArchConfig, build_model, flavour  # noqa: E402

PROXY_STEPS = 200  # a default proxy trial at the bench size (`harness.PROXY_BUDGET`, 2e12 training FLOPs)


def measure(cfg: ArchConfig, rounds: int, per_round: int) -> dict:
    torch.manual_seed(0)
    eager_model = build_model(cfg).train()
    compiled_model = build_model(cfg).train()
    compiled_model.load_state_dict(eager_model.state_dict())
    eager, compiled = make_step(eager_model), make_step(torch.compile(compiled_model))
    start = time.perf_counter()
    compiled()
    compile_s = time.perf_counter() - start
    eager()
    times = time_interleaved({"eager": eager, "compiled": compiled}, rounds, per_round, per_call=False)
    eager_s, compiled_s = statistics.median(times["eager"]), statistics.median(times["compiled"])
    saved = eager_s - compiled_s
    return {
        "compile_s": compile_s,
        "eager_step_s": eager_s,
        "compiled_step_s": compiled_s,
        "compiled_vs_eager": compiled_s / eager_s,
        "break_even_steps": compile_s / saved if saved > 0 else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/compile_cpu.json"))
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--per-round", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="1 layer at d 32, one family: every path, no meaning")
    args = parser.parse_args()
    torch.set_num_threads(2)
    families = FAMILIES[:1] if args.smoke else FAMILIES
    size = dict(n_layers=1, d_model=32, n_heads=2) if args.smoke else {}  # cpu_throughput's batch: bench's seq, vocab
    rows = {fam: measure(flavour("bench", residual=fam, **size), args.rounds, args.per_round) for fam in families}
    pays = [
        fam for fam, r in rows.items() if r["break_even_steps"] is not None and r["break_even_steps"] < PROXY_STEPS / 4
    ]
    verdict = (
        f"compile pays within a quarter of a proxy trial ({PROXY_STEPS} steps) for {', '.join(pays)}"
        if pays
        else f"not taken for proxy trials: none breaks even within a quarter of a proxy trial ({PROXY_STEPS} steps)"
    )
    result = {
        "machine": machine_info(),
        "size": flavour("bench", **size).model_dump(),
        "batch": BATCH,
        "families": rows,
        "verdict": verdict,
    }
    write_json(args.out, result)
    print(json.dumps(result["families"], indent=2), "\n", verdict)


if __name__ == "__main__":
    main()
