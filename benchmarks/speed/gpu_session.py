"""One GPU session: every GPU question of the project in one prepared run, writing JSON after each stage.

A GPU is lent here rarely and briefly (15 minutes of device time, 10 per command), so this script
answers everything at once, in order, within `--budget-s` (default 480 s):

1. `env`: torch, Triton and CUDA versions, the device, its memory, bf16 support, and the
   ceilings the later stages are held against: the spec-sheet bf16 dense FLOP/s and HBM bandwidth,
   a measured bf16 matmul rate (8192^3) and a measured device-to-device copy bandwidth;
2. `kernel_ops`: gpu_kernels.py's per-op benchmark (Triton vs eager vs torch.compile, fp32 and
   bf16, forward and forward + backward, share of peak bandwidth), with fewer repeats;
3. `kernel_steps`: gpu_kernels.py's training steps per family at MoD 0 and 0.25, Triton kernels
   vs reference ops (12 layers, d 768, seq 1024, batch 8, bf16 autocast);
4. `mod_ratios`: the MoD step ratios of the bench variants (`harness.VARIANTS`, which
   cpu_throughput.py times on CPU) at that GPU size with the default kernels: dense vs MoD 0.25
   per sublayer and per block for each family, and cascaded at 0.125 / 0.5 / 0.875 both ways,
   beside the share of the FLOPs each executes;
5. `proxy_trials`: one `run_trial` per family, the default proxy of proxy_trial.py (`bench`
   flavour, MoD 0.25, 2e12 training FLOPs; bf16 and the Triton kernels on CUDA): val loss,
   tokens/s, wall time, executed FLOPs/token and the share of the bf16 peak it reaches.

The JSON is rewritten after each stage (and before it, marked `running`), so a run killed by a
timeout still holds every finished stage. Each stage records its wall time beside its estimate,
a stage that raises is recorded `failed` with its one-line reason and the rest go on, and a stage
whose estimate no longer fits the budget left is `skipped` with the reason.

On a lent GPU run `bash benchmarks/speed/gpu_session.sh` (its header says what travels with the working tree in
`.gpu_carry/` and how to rerun one stage); it leaves gpu_session.json and gpu_session.log in $OUT.

`--smoke` runs every stage at tiny sizes on CPU in under a minute (the CI test does so); with
TRITON_INTERPRET=1 the Triton paths run in Triton's interpreter, without it only the reference
paths run. Its timings mean nothing.

    TRITON_INTERPRET=1 python -m benchmarks.speed.gpu_session --smoke --out /tmp/gpu_session.json
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmarks.harness import (
    FAMILIES,
    MOD_RATES,
    PROXY_BUDGET,
    VARIANTS,
    measured_copy_bandwidth,
    median_seconds,
    spec_sheet,
)
from benchmarks.speed.gpu_kernels import (
    FULL,
    SMOKE,
    TARGETS,
    Shapes,
    machine_info,
    paths_and_backends,
    reference_overhead,
    step_ratios,
    time_families,
    time_ops,
    verdicts,
)
from search_spaces.residual_lm import flavour
from search_spaces.residual_lm.ops import interpreting
from workers import DataConfig, RunConfig, TrialResult, load_corpus, run_trial
from workers.data.corpus import VOCAB_SIZE

log = logging.getLogger("gpu_session")

FLOPS = "executed_forward_flops_per_token"  # gpu_kernels.time_families' per-row count
SUFFIXES = ("", "_block")  # `harness.VARIANTS`' names: MoD routed per sublayer, per block


@dataclass(frozen=True)
class Plan:
    """The sizes of one session: a GPU's, or the smoke run's."""

    kernel_shapes: Shapes  # kernel_ops and kernel_steps
    mod_shapes: Shapes  # mod_ratios
    trial_flavour: str
    trial_budget: float  # training FLOPs per proxy trial
    trial_run: RunConfig
    matmul_n: int  # side of the square matmul that measures the FLOP/s ceiling
    estimates_s: dict[str, float] = field(default_factory=dict)


# Estimates on an H200, each from counted work over the rates seen on one (~790 TFLOP/s
# bf16 matmul, ~4.3 TB/s copy) plus compile times; none was timed there yet, and each run records
# its stages' wall times beside these to correct them.
GPU = Plan(
    kernel_shapes=replace(FULL, op_repeats=50, repeats=15, warmup=3),
    mod_shapes=replace(FULL, repeats=20, warmup=3),
    trial_flavour="bench",
    trial_budget=PROXY_BUDGET,
    trial_run=RunConfig(),  # proxy_trial.py's: batch 16, the CPU numbers compare one to one
    matmul_n=8192,
    estimates_s={
        # CUDA and cuBLAS start (~5 s); 13 matmuls of 1.1 TFLOP and 23 copies of 1 GiB: < 0.2 s
        "env": 15,
        # 10 op rows (5 ops x 2 dtypes): Triton JIT of forward + backward (~2 s) and two
        # torch.compile graphs (no-grad and grad, ~5 s each cold, 16 compile workers); the timings
        # themselves: 10 x 3 paths x 2 x 53 calls of < 0.2 ms, about 1 s
        "kernel_ops": 150,
        # 12 models (6 variants x 2 backends) at 4.65 TFLOP per step: ~15 ms at 40% of 790 TFLOP/s,
        # 18 steps each (4 s), plus building each and its first steps (JIT, cuBLAS) ~2 s
        "kernel_steps": 45,
        # 15 models, 23 steps each at 10-20 ms (7 s), plus ~3 s each to build and warm up
        "mod_ratios": 60,
        # 3 x (207 launch-bound steps of 2048 tokens at ~15 ms + 4 evaluations, width probe,
        # first-call JITs): ~15 s each
        "proxy_trials": 60,
    },
)
SMOKE_PLAN = Plan(
    kernel_shapes=SMOKE,
    mod_shapes=replace(SMOKE, repeats=2),
    trial_flavour="debug",
    trial_budget=2e9,
    trial_run=RunConfig(batch_size=4, eval_sequences=16, evals=2),
    matmul_n=128,
    # about 3x the wall times on the 2-core CPU machine with TRITON_INTERPRET=1 (whole run ~8 s)
    estimates_s={"env": 1, "kernel_ops": 3, "kernel_steps": 6, "mod_ratios": 2, "proxy_trials": 10},
)


@dataclass
class Session:
    """What every stage reads: the device, the plan, the time left, the stages finished so far."""

    device: torch.device
    plan: Plan
    smoke: bool
    deadline: float  # time.monotonic() at which the budget ends
    results: dict[str, dict] = field(default_factory=dict)

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def peak(self, key: str) -> float | None:
        """A ceiling measured by `env` (None if env did not run)."""
        return self.results.get("env", {}).get("peaks", {}).get(key)


# --- the stages -------------------------------------------------------------------------------


def stage_env(s: Session) -> dict:
    """Versions, device facts and the ceilings (FLOP/s, bandwidth) the later stages are held against."""
    info = machine_info(s.device)
    info.update(
        cudnn=torch.backends.cudnn.version() if s.device.type == "cuda" else None,
        env={k: os.environ.get(k) for k in ("TRITON_INTERPRET", "RESNAS_KERNELS", "RESNAS_CACHE")},
    )
    if s.device.type == "cuda":
        props = torch.cuda.get_device_properties(s.device)
        info.update(
            compute_capability=f"{props.major}.{props.minor}",
            bf16_supported=torch.cuda.is_bf16_supported(),
            gpu_memory_free_gib=torch.cuda.mem_get_info(s.device)[0] / 2**30,
            nvidia_smi=_nvidia_smi(),
        )
    dtype = torch.bfloat16 if s.device.type == "cuda" else torch.float32
    n = s.plan.matmul_n
    a, b = (torch.randn(n, n, device=s.device, dtype=dtype) for _ in range(2))
    matmul = 2 * n**3 / median_seconds(lambda: a @ b, s.device, repeats=10, warmup=3)
    spec_bandwidth, spec_flops = spec_sheet(s.device)
    info["peaks"] = {
        "spec_bf16_flops_per_s": spec_flops,
        "measured_matmul_flops_per_s": matmul,
        "measured_matmul": f"{n}^3 {str(dtype).removeprefix('torch.')}",
        "spec_bandwidth_bytes_per_s": spec_bandwidth,
        "measured_copy_bytes_per_s": measured_copy_bandwidth(s.device),
    }
    return info


def _nvidia_smi() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    query = "name,driver_version,memory.total,clocks.max.sm,clocks.sm,power.limit,temperature.gpu"
    done = subprocess.run(
        ["nvidia-smi", f"--query-gpu={query}", "--format=csv"], capture_output=True, text=True, timeout=20
    )
    return done.stdout.strip() or done.stderr.strip()


def stage_kernel_ops(s: Session) -> dict:
    """gpu_kernels.py's per-op table: Triton vs eager vs torch.compile, fp32 and bf16."""
    shapes = s.plan.kernel_shapes
    paths, _ = paths_and_backends(s.device)
    peak = s.peak("spec_bandwidth_bytes_per_s")
    copy_peak = s.peak("measured_copy_bytes_per_s")
    ops = time_ops(shapes, [torch.float32, torch.bfloat16], s.device, paths, peak, copy_peak)
    return {
        "paths": paths,
        "shapes": asdict(shapes),
        "ops": ops,
        "targets": {k: v for k, v in TARGETS.items() if k.startswith("op_")},
        "targets_met": None if s.smoke or interpreting() else verdicts(ops, {}),
    }


def stage_kernel_steps(s: Session) -> dict:
    """gpu_kernels.py's training steps per family at MoD 0 and 0.25, Triton vs reference ops."""
    shapes = s.plan.kernel_shapes
    _, backends = paths_and_backends(s.device)
    rows = time_families(shapes, s.device, backends)
    ratios = step_ratios(rows, backends)
    ops = s.results.get("kernel_ops", {}).get("ops")
    try:  # the share of each reference step spent in the fused ops needs kernel_ops' eager timings
        overhead = reference_overhead(ops, rows, shapes) if ops else None
    except KeyError:
        overhead = None
    return {
        "backends": backends,
        "shapes": asdict(shapes),
        "steps": rows,
        "ratios": ratios,
        "reference_overhead": overhead,
        "targets_met": None if s.smoke or interpreting() else verdicts({}, ratios),
    }


def stage_mod_ratios(s: Session) -> dict:
    """The bench variants (`harness.VARIANTS`) at the GPU size, default kernels, interleaved step times."""
    shapes = s.plan.mod_shapes
    rows = time_families(shapes, s.device, ["auto"], variants=VARIANTS)
    ratios, sweep = mod_summary(rows)
    met = {
        k: v <= TARGETS["mod0.25_vs_dense_step_time" if "_mod0.25" in k else "family_vs_cascaded_step_time"]
        for k, v in ratios.items()
        if v is not None
    }
    return {
        "shapes": asdict(shapes),
        "steps": rows,
        "ratios": ratios,
        "cascaded_mod_sweep": sweep,
        "targets_met": None if s.smoke or interpreting() else met,
    }


def mod_summary(rows: dict) -> tuple[dict, dict]:
    """cpu_throughput.py's ratios (None where a variant failed) and its cascaded rate sweep."""
    timed = {k.removesuffix("/auto"): r for k, r in rows.items() if "median_step_s" in r}

    def ratio(a: str, b: str, key: str = "median_step_s") -> float | None:
        return timed[a][key] / timed[b][key] if a in timed and b in timed else None

    families = FAMILIES
    ratios = {
        **{f"{f}_vs_cascaded_step_time": ratio(f, "cascaded") for f in families if f != "cascaded"},
        **{f"{f}_mod0.25{sfx}_vs_dense_step_time": ratio(f"{f}_mod0.25{sfx}", f) for f in families for sfx in SUFFIXES},
    }
    sweep = {
        f"{rate}{sfx}": {
            "step_time_vs_dense": ratio(f"cascaded_mod{rate}{sfx}", "cascaded"),
            "executed_flops_vs_dense": ratio(f"cascaded_mod{rate}{sfx}", "cascaded", FLOPS),
        }
        for rate in MOD_RATES
        for sfx in SUFFIXES
    }
    return ratios, sweep


def stage_proxy_trials(s: Session) -> dict:
    """One `run_trial` per family at the plan's flavour and budget; families that no longer fit are skipped."""
    plan = s.plan
    configs = {  # before the corpus: a bad flavour fails at once
        f: flavour(plan.trial_flavour, residual=f, mod_rate=0.25, vocab_size=VOCAB_SIZE) for f in FAMILIES
    }
    corpus = load_corpus(DataConfig())
    trials = {}
    for family, cfg in configs.items():
        if s.left_s() < plan.estimates_s["proxy_trials"] / len(configs):
            trials[family] = {"status": "skipped", "reason": f"{max(s.left_s(), 0):.0f} s of the budget left"}
            continue
        if s.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        trials[family] = _trial_row(run_trial(cfg, plan.trial_budget, corpus, run=plan.trial_run), s)
        log.info("trial %s: %s", family, {k: trials[family][k] for k in ("status", "val_loss", "wall_time_s")})
    return {
        "flavour": plan.trial_flavour,
        "mod_rate": 0.25,
        "budget_flops": plan.trial_budget,
        "run": plan.trial_run.model_dump(),
        "corpus": corpus.name,
        "trials": trials,
    }


def _trial_row(r: TrialResult, s: Session) -> dict:
    """The trial's own record, plus its achieved FLOP/s (whole trial, and inside training steps) as shares of peak."""
    step_s = r.wall_time_s * r.step_time_share if r.step_time_share else None
    rates = {
        "whole_trial": r.training_flops / r.wall_time_s if r.wall_time_s > 0 else None,
        "in_steps": r.training_flops / step_s if step_s else None,
    }
    peaks = {k: s.peak(k) for k in ("spec_bf16_flops_per_s", "measured_matmul_flops_per_s")}
    fields = (
        "status",
        "failure_reason",
        "val_loss",
        "tokens_seen",
        "steps",
        "wall_time_s",
        "tokens_per_s",
        "step_time_share",
        "peak_memory_mb",
        "executed_flops_per_token",
        "training_flops",
    )
    row = {k: getattr(r, k) for k in fields}
    row["status"] = str(getattr(r.status, "value", r.status))
    row["val_loss"] = row["val_loss"] if math.isfinite(row["val_loss"]) else None  # JSON has no inf
    row["achieved_flops_per_s"] = rates
    row["share_of_peak"] = {
        f"{where}/{peak}": rate / value if rate and value else None
        for where, rate in rates.items()
        for peak, value in peaks.items()
    }
    return row


STAGES: dict[str, Callable[[Session], dict]] = {
    "env": stage_env,
    "kernel_ops": stage_kernel_ops,
    "kernel_steps": stage_kernel_steps,
    "mod_ratios": stage_mod_ratios,
    "proxy_trials": stage_proxy_trials,
}


# --- the session ------------------------------------------------------------------------------


def one_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"[:500]


def write(out: Path, record: dict) -> None:
    """Atomically: a run killed mid-write leaves the previous complete JSON."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(record, indent=2, default=str))
    os.replace(tmp, out)


def run_stage(name: str, s: Session) -> dict:
    """One stage's entry: ok with its result, failed with the reason, or skipped for lack of time."""
    estimate = s.plan.estimates_s[name]
    if estimate > s.left_s():
        reason = f"estimated {estimate:.0f} s, {max(s.left_s(), 0):.0f} s of the budget left"
        return {"status": "skipped", "estimate_s": estimate, "reason": reason}
    start = time.perf_counter()
    try:
        entry = {"status": "ok", "result": STAGES[name](s)}
        s.results[name] = entry["result"]
    except Exception as err:  # one failing stage must not cost the others their answers
        entry = {"status": "failed", "reason": one_line(err), "traceback": traceback.format_exc(limit=-4)}
    finally:
        gc.collect()
        if s.device.type == "cuda":
            torch.cuda.empty_cache()
    return {**entry, "estimate_s": estimate, "wall_s": time.perf_counter() - start}


def run_session(s: Session, stages: list[str], out: Path) -> dict:
    """Run `stages` in order, rewriting `out` before and after each."""
    start = time.perf_counter()
    record = {
        "session": {
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "argv": sys.argv[1:],
            "device": str(s.device),
            "smoke": s.smoke,
            "budget_s": round(s.left_s(), 3),
            "finished": False,
        },
        "stages": {name: {"status": "pending"} for name in stages},
    }
    for name in stages:
        record["stages"][name] = {"status": "running", "estimate_s": s.plan.estimates_s[name]}
        write(out, record)
        log.info("stage %s: starting (%.0f s left)", name, s.left_s())
        entry = record["stages"][name] = run_stage(name, s)
        log.info("stage %s: %s in %.1f s %s", name, entry["status"], entry.get("wall_s", 0), entry.get("reason", ""))
    record["session"].update(finished=True, wall_s=time.perf_counter() - start)
    write(out, record)
    return record


def default_out(smoke: bool) -> Path:
    name = "gpu_session_smoke.json" if smoke else "gpu_session.json"
    return Path(os.environ["OUT"]) / name if os.environ.get("OUT") else Path("benchmarks/results") / name


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="default: $OUT/gpu_session.json, else benchmarks/results/")
    parser.add_argument("--budget-s", type=float, default=480.0, help="seconds for all stages together")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on any device: checks every stage runs")
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset, run in this order")
    parser.add_argument("--trial-flavour", help="flavour of the proxy trials (default: bench; smoke: debug)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    stages = [name.strip() for name in args.stages.split(",") if name.strip()]
    if unknown := [n for n in stages if n not in STAGES]:
        parser.error(f"unknown stages {unknown}; known: {list(STAGES)}")
    device = torch.device(args.device)
    if device.type != "cuda" and not args.smoke:
        parser.error("the full session needs a CUDA device; use --smoke on a CPU")
    plan = SMOKE_PLAN if args.smoke else GPU
    if args.trial_flavour:
        plan = replace(plan, trial_flavour=args.trial_flavour)
    session = Session(device, plan, args.smoke, deadline=time.monotonic() + args.budget_s)
    out = args.out or default_out(args.smoke)
    record = run_session(session, stages, out)
    log.info("wrote %s", out)
    return record


if __name__ == "__main__":
    main()
