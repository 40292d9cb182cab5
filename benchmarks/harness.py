"""Shared parts of the benchmarks: the machine record, the bench size and step, timing, resumable tables.

- `machine_info()`: the record every result JSON keeps under "machine" (CPU, platform, torch, threads).
- `SIZE`, `BATCH`, `VARIANTS`: the `bench` flavour's size, its batch, and the residual/MoD variants timed
  at it (`cpu_throughput`, and `gpu_session` at a GPU size); `make_step` is one training step at that size.
- `time_interleaved`: step times of several models, round by round, so machine drift hits each alike;
  `median_seconds` of one call. `spec_sheet`, `measured_copy_bandwidth`: a GPU's ceilings.
- `pending`, `append_runs`, `read_table`: a table of real runs built job by job into a CSV, resumed where a
  build stopped, and read back typed (every benchmark that reads a CSV table reads it so).
- `write_json`, `quantiles_ms`: a result file, and the median/p99 of a list of seconds.
- `TableSampler`: a search's sampler (TPE, random) proposing configs of a table, asked and told as a study is (the
  replays that use it are `benchmarks.trust.replay`'s).

Run a benchmark as a module from the repository root: `python -m benchmarks.<name> --help`.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import multiprocessing as mp
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from search_spaces.residual_lm import FAMILIES as MODEL_FAMILIES
from search_spaces.residual_lm import flavour

STARTED = time.monotonic()  # a benchmark imports the harness first: its run starts here

log = logging.getLogger("benchmarks")

FAMILIES = tuple(MODEL_FAMILIES)  # cascaded, nag, ancre: the order every table and figure uses
_BENCH = flavour("bench")
SIZE = {k: getattr(_BENCH, k) for k in ("vocab_size", "seq_len", "n_layers", "d_model", "n_heads")}
BATCH = 16
PROXY_BUDGET = 2e12  # training FLOPs of the default proxy trial at the bench size (about 200 steps)
# mod_every=1 routes blocks 2-4: at mod_rate 0.25 that skips 3/4 * 25% of all sublayer pairs.
# (mod_every=2 routes only blocks 2 and 4, so 12.5%: it cannot reach 0.85x by construction.)
MOD_RATES = (0.125, 0.25, 0.5, 0.875)  # the step time should fall roughly in proportion to the skipped FLOPs
VARIANTS: dict[str, dict[str, Any]] = {
    **{fam: dict(residual=fam) for fam in FAMILIES},
    # per-sublayer routing (each sublayer decides) and block routing (one decision per block), every family
    **{f"{fam}_mod0.25": dict(residual=fam, mod_rate=0.25, mod_every=1) for fam in FAMILIES},
    **{
        f"{fam}_mod0.25_block": dict(residual=fam, mod_rate=0.25, mod_every=1, mod_granularity="block")
        for fam in FAMILIES
    },
    # the rate sweep, cascaded, both granularities
    **{
        f"cascaded_mod{rate}{suffix}": dict(
            residual="cascaded", mod_rate=rate, mod_every=1, mod_granularity=granularity
        )
        for rate in MOD_RATES
        if rate != 0.25
        for suffix, granularity in (("", "sublayer"), ("_block", "block"))
    },
}


# Spec sheets, matched against torch.cuda.get_device_name() in this order: (HBM bytes/s, dense bf16 tensor-core
# FLOP/s without sparsity). The H200 has the H100 SXM's compute; one H200 lent to this project was seen at about
# 790 TFLOP/s on an 8192^3 bf16 matmul and a 4.3 TB/s copy, which gpu_session.py's `env` stage measures again.
SPEC_SHEETS = {
    "H200": (4.8e12, 989e12),
    "H100 SXM": (3.35e12, 989e12),
    "H100 NVL": (3.9e12, 835e12),
    "H100 PCIe": (2.0e12, 756e12),
    "H100": (3.35e12, 989e12),
    "A100-SXM4-80GB": (2.039e12, 312e12),
    "A100 80GB PCIe": (1.935e12, 312e12),
    "A100": (1.555e12, 312e12),
    "L40S": (0.864e12, 362e12),
}


def machine_info() -> dict:
    """The machine a result was measured on: platform, CPU model and cores, torch version and threads, Python,
    and its load average (1, 5, 15 min) then: other jobs share a machine's cores and timings."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)
    return {
        "platform": platform.platform(),
        "cpu": cpu or platform.processor(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "cores": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }


def make_step(
    model: nn.Module,
    *,
    batch: int = BATCH,
    seq_len: int = SIZE["seq_len"],
    vocab_size: int = SIZE["vocab_size"],
    optimizer: torch.optim.Optimizer | None = None,
    clip_norm: float | None = None,
    fused_optimizer: bool = True,
) -> Callable[[], None]:
    """One training step (forward, cross-entropy, backward, [clip,] optimiser) on a cycle of 4 random batches.

    The optimiser defaults to torch's AdamW at lr 1e-3, fused (as `workers.training.train.build_optimizer` uses
    it) unless `fused_optimizer` is False; `clip_norm` clips the gradient norm before the step.
    """
    opt = optimizer or torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True if fused_optimizer else None)
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, vocab_size, (batch, seq_len + 1), generator=gen) for _ in range(4)]
    state = {"i": 0}

    def step() -> None:
        window = batches[state["i"] % len(batches)]
        state["i"] += 1
        logits = model(window[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        opt.step()

    return step


def synchronize(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def elapsed_s(fn: Callable[[], object], device: torch.device | None = None) -> float:
    """Wall seconds of one fn() call: CUDA events on a CUDA device, perf_counter elsewhere."""
    if device is not None and device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    start_s = time.perf_counter()
    fn()
    return time.perf_counter() - start_s


def median_seconds(fn: Callable[[], object], device: torch.device, repeats: int, warmup: int) -> float:
    """Median wall time of fn() over `repeats` calls (CUDA events on GPU, perf_counter elsewhere)."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    return statistics.median(elapsed_s(fn, device) for _ in range(repeats))


def measured_copy_bandwidth(device: torch.device) -> float | None:
    """Bytes/s of a device-to-device copy of 1 GiB (read + write): the achievable peak."""
    if device.type != "cuda":
        return None
    src = torch.empty(2**28, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src), device, repeats=20, warmup=3)
    return 2 * src.numel() * src.element_size() / seconds


def spec_sheet(device: torch.device) -> tuple[float | None, float | None]:
    """The device's spec-sheet (HBM bytes/s, dense bf16 FLOP/s), (None, None) where it has none."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    return next((v for key, v in SPEC_SHEETS.items() if key in name), (None, None))


def time_interleaved(
    steps: Mapping[str, Callable[[], object]],
    rounds: int,
    per_round: int = 1,
    warmup: int = 0,
    *,
    per_call: bool = True,
    device: torch.device | None = None,
) -> dict[str, list[float]]:
    """Seconds per step of each of `steps`, interleaved: each round runs every step `per_round` times, in turn.

    Each step first runs `warmup` times, untimed. With `per_call` every call is one sample; without, a
    round gives one sample per step, the mean of its `per_round` calls under one timer (CPU only).
    Take the median of each list: a slow round then moves no model's figure alone.
    """
    for step in steps.values():
        for _ in range(warmup):
            step()
    synchronize(device)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for r in range(rounds):
        for name, step in steps.items():
            if per_call:
                times[name] += [elapsed_s(step, device) for _ in range(per_round)]
            else:
                start = time.perf_counter()
                for _ in range(per_round):
                    step()
                times[name].append((time.perf_counter() - start) / per_round)
        log.info("round %d/%d done", r + 1, rounds)
    return times


def quantiles_ms(xs: list[float]) -> dict:
    """Median and 99th percentile (nearest rank: the ceil(0.99 n)-th smallest) of `xs` seconds, in ms, and n."""
    ordered = sorted(xs)
    p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
    return {"median": 1e3 * statistics.median(ordered), "p99": 1e3 * p99, "n": len(ordered)}


def write_json(path: Path, result: Any) -> None:
    """`result` as indented JSON at `path` (its folder made if absent), ending in a newline. A result with
    a machine record gets `run_seconds` there: wall time since this module was imported (a benchmark's
    start), which the index shows as its run time."""
    if isinstance(result, dict) and isinstance(result.get("machine"), dict):
        result["machine"]["run_seconds"] = round(time.monotonic() - STARTED, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")


def update_json(path: Path, key: str, part: dict) -> None:
    """Put `part` (with its own machine record and `run_seconds`) under `key` of the JSON at `path`, the rest of
    the file as it was: one part of a benchmark measured again alone."""
    result = json.loads(path.read_text()) if path.exists() else {}
    part["machine"] = {**machine_info(), "run_seconds": round(time.monotonic() - STARTED, 1)}
    result[key] = part
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")


# How each column of the benchmarks' tables that holds a number or a flag reads; any other column is text.
COLUMN_TYPES: dict[str, Callable[[str], Any]] = {
    **dict.fromkeys(
        ("config", "n_layers", "d_model", "params", "seed", "rung", "tokens", "tokens_seen", "steps",
         "replica_d_model", "replica_params", "n_heads"),
        int,
    ),
    **dict.fromkeys(
        ("mod_rate", "lr", "lr_used", "nag_gate_lr", "horizon_exponent", "executed_flops_per_token", "budget_flops",
         "val_loss", "compute_flops", "wall_time_s", "tokens_per_param", "target_tokens_per_param"),
        float,
    ),
    "on_path": lambda text: text == "True",
}  # fmt: skip


def read_table(path: Path) -> list[dict]:
    """The rows of a CSV table of runs, typed by `COLUMN_TYPES` (an empty cell of a typed column: None)."""
    with path.open() as fh:
        return [{k: _cell(k, v) for k, v in r.items()} for r in csv.DictReader(fh)]


def _cell(column: str, text: str) -> Any:
    if column not in COLUMN_TYPES:
        return text
    return COLUMN_TYPES[column](text) if text else None


def pending(jobs: Iterable[Any], rows: Iterable[dict], job_key: Callable, row_key: Callable) -> list:
    """The jobs whose `job_key` no row's `row_key` matches: what a table of `rows` still lacks, in order."""
    done = {row_key(r) for r in rows}
    return [j for j in jobs if job_key(j) not in done]


def append_runs(
    path: Path,
    todo: list,
    run: Callable[[Any], list[dict]],
    *,
    columns: list[str],
    processes: int = 2,
    describe: Callable[[list[dict]], str] | None = None,
) -> None:
    """Run `todo` in a spawn pool of `processes`, appending each job's rows to the CSV at `path` as it ends.

    `run` (module level, for the pool) returns a job's rows; each batch is flushed at once, so a killed
    build loses only the jobs in flight and `pending` finds the rest. A new table gets the header
    `columns`; an existing one keeps its own, and fields it lacks are dropped.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = columns
    if path.exists() and path.stat().st_size > 0:
        with path.open() as fh:
            fields = next(csv.reader(fh))
    fresh = fields is columns
    start = time.perf_counter()
    with mp.get_context("spawn").Pool(processes) as pool, path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        if fresh:
            writer.writeheader()
        for k, rows in enumerate(pool.imap_unordered(run, todo), start=1):
            writer.writerows(rows)
            fh.flush()
            note = f" {describe(rows)}" if describe else ""
            print(f"[{k}/{len(todo)} {time.perf_counter() - start:6.0f}s]{note}", flush=True)


class TableSampler:
    """Optuna's sampler (`nas.search.study.make_sampler`) proposing configs of a table over its categorical knobs
    (`space`: each knob's values), both objectives minimised (loss, executed FLOPs per token), asked and told as
    a search's study is: `ask` gives the next knobs, `tell` their objectives, or None (FAIL) for knobs the table
    lacks."""

    def __init__(self, space: Mapping[str, Sequence], sampler: str, seed: int):
        import optuna

        from nas.search.study import make_sampler

        self.space: dict[str, optuna.distributions.BaseDistribution] = {
            k: optuna.distributions.CategoricalDistribution(list(v)) for k, v in space.items()
        }
        self.study = optuna.create_study(directions=["minimize", "minimize"], sampler=make_sampler(sampler, seed))
        self._trial: optuna.trial.Trial | None = None

    def ask(self) -> dict:
        self._trial = self.study.ask(self.space)
        return self._trial.params

    def tell(self, values: tuple[float, float] | None) -> None:
        import optuna

        assert self._trial is not None, "tell before ask"
        if values is None:
            self.study.tell(self._trial, state=optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(self._trial, values)
