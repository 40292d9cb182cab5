"""Fused kernels against eager PyTorch and torch.compile, and whole training steps per family.

One run, on one device, measures side by side (interleaved, median of repeats):
1. per op (NAG epilogue, add + RMSNorm, ANCRe mixing), forward and forward + backward: the Triton kernel, the
   eager reference, and `torch.compile` of the reference (CUDA only); and the forward's achieved bandwidth (the
   bytes it must move at least, over its time) as a share of the spec sheet's and of a measured copy's;
2. the training step (forward + backward + AdamW, bf16 autocast on CUDA) of each family at a GPU-sized proxy,
   MoD rate 0 and 0.25, with the Triton kernels and with the reference ops.
`TARGETS` are an H100/H200-class GPU's. On a lent GPU, `benchmarks.speed.gpu_session` runs both as its stages.

    python -m benchmarks.speed.gpu_kernels --out benchmarks/results/gpu_kernels.json          # on a GPU
    python -m benchmarks.speed.gpu_kernels --reference-only --device cpu --out benchmarks/results/reference_ops_cpu.json
    TRITON_INTERPRET=1 python -m benchmarks.speed.gpu_kernels --smoke --out /tmp/smoke.json   # CPU check

`--reference-only` skips the Triton path: the CPU figures (the share of each family's step its reference ops
take). `--smoke`: tiny shapes, one repeat, every path (Triton's interpreter on CPU); its timings mean nothing.
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.harness import (
    BATCH,
    FAMILIES,
    SIZE,
    measured_copy_bandwidth,
    median_seconds,
    spec_sheet,
    time_interleaved,
    write_json,
)
from benchmarks.harness import machine_info as cpu_machine_info
from search_spaces.residual_lm import ArchConfig, build_model, flops_per_token
from search_spaces.residual_lm.ops import TRITON_AVAILABLE, interpreting, triton, use_backend
from search_spaces.residual_lm.ops.add_rmsnorm import add_rmsnorm, add_rmsnorm_bytes, add_rmsnorm_reference
from search_spaces.residual_lm.ops.ancre_mix import ancre_mix, ancre_mix_bytes, ancre_mix_reference
from search_spaces.residual_lm.ops.nag_epilogue import nag_epilogue, nag_epilogue_bytes, nag_epilogue_reference

log = logging.getLogger("gpu_kernels")

TARGETS = {
    "op_speedup_vs_eager": 2.0,
    "op_share_of_peak_bandwidth": 0.70,
    "family_vs_cascaded_step_time": 1.05,
    "mod0.25_vs_dense_step_time": 0.85,
}


@dataclass(frozen=True)
class Shapes:
    rows: int  # B * T token rows
    d: int
    gate_components: int
    ancre_states: tuple[int, ...]  # j values to time for ANCRe mixing
    model: dict  # ArchConfig fields of the whole-step proxy
    batch: int
    repeats: int  # whole training steps, interleaved round by round
    op_repeats: int  # calls of one op (milliseconds each: cheap to repeat, noisy if not)
    warmup: int


FULL = Shapes(
    rows=8 * 1024,
    d=768,
    gate_components=32,
    ancre_states=(4, 13),
    model=dict(vocab_size=256, seq_len=1024, n_layers=12, d_model=768, n_heads=12),
    batch=8,
    repeats=30,
    op_repeats=100,
    warmup=5,
)
SMOKE = Shapes(
    rows=24,
    d=48,
    gate_components=4,
    ancre_states=(3, 9),
    model=dict(vocab_size=64, seq_len=16, n_layers=2, d_model=32, n_heads=2),
    batch=2,
    repeats=1,
    op_repeats=1,
    warmup=0,
)
# The CPU reference-path overhead runs at the bench size (the CPU proxy).
CPU = Shapes(
    rows=BATCH * SIZE["seq_len"],
    d=SIZE["d_model"],
    gate_components=32,
    ancre_states=(3, 5),
    model=dict(SIZE),
    batch=BATCH,
    repeats=30,
    op_repeats=200,
    warmup=3,
)


# --- the ops: (inputs, the op on them, its minimum forward bytes) -----------------------------


def nag_case(shapes: Shapes, dtype: torch.dtype, device: torch.device):
    n, d, c = shapes.rows, shapes.d, shapes.gate_components
    u = torch.randn(n, d, device=device)
    u = u - u.mean(-1, keepdim=True)
    u = (u * math.sqrt(d) / u.norm(dim=-1, keepdim=True)).to(dtype)
    tensors = dict(
        u=u,
        f=torch.randn(n, d, device=device, dtype=dtype),
        s=torch.randn(n, device=device, dtype=dtype),
        pre=torch.randn(n, c, device=device, dtype=dtype),
        mix_weights=torch.softmax(torch.randn(c, device=device), 0),
        beta=torch.tensor(1.3, device=device),
        alpha=torch.tensor(0.4, device=device),
    )
    for t in tensors.values():
        t.requires_grad_(True)
    args = list(tensors.values())
    return args, nag_epilogue, nag_epilogue_reference, nag_epilogue_bytes(n, d, c, dtype)


def add_rmsnorm_case(shapes: Shapes, dtype: torch.dtype, device: torch.device):
    n, d = shapes.rows, shapes.d
    args = [
        torch.randn(n, d, device=device, dtype=dtype, requires_grad=True),
        torch.randn(n, d, device=device, dtype=dtype, requires_grad=True),
        (1 + 0.1 * torch.randn(d, device=device)).to(dtype).requires_grad_(True),
    ]
    return args, add_rmsnorm, add_rmsnorm_reference, add_rmsnorm_bytes(n, d, dtype, True)


def rmsnorm_case(shapes: Shapes, dtype: torch.dtype, device: torch.device):
    """The same op without the add (delta None): every block's attention pre-norm and the final norm."""
    (x, _, weight), _, _, _ = add_rmsnorm_case(shapes, dtype, device)
    return (
        [x, weight],
        lambda x, w: add_rmsnorm(x, None, w),
        lambda x, w: add_rmsnorm_reference(x, None, w),
        add_rmsnorm_bytes(shapes.rows, shapes.d, dtype, False),
    )


def ancre_case(j: int):
    def case(shapes: Shapes, dtype: torch.dtype, device: torch.device):
        n, d = shapes.rows, shapes.d
        p = torch.softmax(torch.randn(j, device=device), 0).requires_grad_(True)
        states = [torch.randn(n, d, device=device, dtype=dtype, requires_grad=True) for _ in range(j)]
        return (
            [p, *states],
            lambda p, *s: ancre_mix(p, list(s)),
            lambda p, *s: ancre_mix_reference(p, list(s)),
            ancre_mix_bytes(n, d, j, dtype),
        )

    return case


def forward_backward(op: Callable, args: list[torch.Tensor]) -> Callable[[], object]:
    """One forward and one backward (gradients returned, not accumulated into .grad)."""

    def run():
        out = op(*args)
        outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o is not None]
        return torch.autograd.grad(outs, args, [torch.ones_like(o) for o in outs], allow_unused=True)

    return run


def forward_only(op: Callable, args: list[torch.Tensor]) -> Callable[[], object]:
    def run():
        with torch.no_grad():
            return op(*args)

    return run


def time_op(
    name: str,
    case,
    shapes: Shapes,
    dtype: torch.dtype,
    device: torch.device,
    paths: list[str],
    peak: float | None,
    copy_peak: float | None,
) -> dict:
    args, op, reference, min_bytes = case(shapes, dtype, device)
    variants = {}
    if "triton" in paths:
        variants["triton"] = lambda *a: _with_backend("triton", op, a)
    variants["eager"] = reference  # plain PyTorch: never consults the backend
    if "compile" in paths:
        variants["compile"] = torch.compile(reference, dynamic=False)
    row = {"dtype": str(dtype).removeprefix("torch."), "min_forward_bytes": min_bytes}
    for vname, fn in variants.items():
        try:
            fwd = median_seconds(forward_only(fn, args), device, shapes.op_repeats, shapes.warmup)
            both = median_seconds(forward_backward(fn, args), device, shapes.op_repeats, shapes.warmup)
        except Exception as err:  # one failing path must not hide the others
            row[vname] = {"error": f"{type(err).__name__}: {err}".splitlines()[0]}
            continue
        row[vname] = {
            "forward_s": fwd,
            "forward_backward_s": both,
            "forward_bandwidth_bytes_per_s": min_bytes / fwd,
            "forward_share_of_spec_peak": None if peak is None else min_bytes / fwd / peak,
            "forward_share_of_copy_peak": None if copy_peak is None else min_bytes / fwd / copy_peak,
        }
    for base in ("eager", "compile"):
        if "forward_s" in row.get("triton", {}) and "forward_s" in row.get(base, {}):
            row[f"triton_speedup_vs_{base}"] = {
                k: row[base][k] / row["triton"][k] for k in ("forward_s", "forward_backward_s")
            }
    log.info("%s %s: %s", name, row["dtype"], {k: v for k, v in row.items() if k.startswith("triton_speedup")})
    return row


def _with_backend(name: str, fn: Callable, args):
    with use_backend(name):
        return fn(*args)


# --- whole training steps ---------------------------------------------------------------------

FAMILY_VARIANTS = {
    f"{fam}{suffix}": dict(residual=fam, **knobs)
    for fam in FAMILIES
    for suffix, knobs in (("", {}), ("_mod0.25", dict(mod_rate=0.25, mod_every=1)))
}


def training_step(cfg: ArchConfig, batch: int, device: torch.device, backend_name: str) -> Callable[[], None]:
    torch.manual_seed(0)
    model = build_model(cfg).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    window = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_len + 1), device=device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def step() -> None:
        with use_backend(backend_name), autocast:
            logits = model(window[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), window[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def time_families(
    shapes: Shapes, device: torch.device, backends: list[str], variants: dict[str, dict] = FAMILY_VARIANTS
) -> dict:
    """Median step time of every (variant, backend), interleaved round by round.

    `variants` maps a name to ArchConfig knobs beside `shapes.model` (default: each family at MoD 0
    and 0.25); rows are keyed `name/backend`.
    """
    steps, rows = {}, {}
    for name, knobs in variants.items():
        cfg = ArchConfig(**shapes.model, **knobs)
        for backend_name in backends:
            key = f"{name}/{backend_name}"
            try:
                steps[key] = training_step(cfg, shapes.batch, device, backend_name)
                for _ in range(max(1, shapes.warmup)):
                    steps[key]()
            except Exception as err:  # e.g. out of memory: record it, time the rest
                rows[key] = {"error": f"{type(err).__name__}: {err}".splitlines()[0]}
                steps.pop(key, None)
            else:
                rows[key] = {"executed_forward_flops_per_token": flops_per_token(cfg).executed}
    times = time_interleaved(steps, shapes.repeats, device=device)
    tokens = shapes.batch * shapes.model["seq_len"]
    for key, ts in times.items():
        rows[key].update(median_step_s=statistics.median(ts), tokens_per_s=tokens / statistics.median(ts))
    return rows


def step_ratios(rows: dict, backends: list[str]) -> dict:
    step = {k: r["median_step_s"] for k, r in rows.items() if "median_step_s" in r}
    ratios = {}
    for b in backends:
        for fam in ("nag", "ancre"):
            if f"{fam}/{b}" in step and f"cascaded/{b}" in step:
                ratios[f"{fam}_vs_cascaded_step_time/{b}"] = step[f"{fam}/{b}"] / step[f"cascaded/{b}"]
        for fam in FAMILIES:
            if f"{fam}_mod0.25/{b}" in step and f"{fam}/{b}" in step:
                ratios[f"{fam}_mod0.25_vs_dense_step_time/{b}"] = step[f"{fam}_mod0.25/{b}"] / step[f"{fam}/{b}"]
    if "triton" in backends and "reference" in backends:
        for name in FAMILY_VARIANTS:
            if f"{name}/triton" in step and f"{name}/reference" in step:
                ratios[f"{name}_triton_vs_reference_step_time"] = step[f"{name}/triton"] / step[f"{name}/reference"]
    return ratios


def reference_overhead(ops: dict, rows: dict, shapes: Shapes) -> dict:
    """Share of each family's reference-path step spent in the ops the kernels fuse.

    Op calls per step, at L blocks: NAG runs its epilogue 2L times; cascaded and ANCRe run one
    add + RMSNorm per block (the MLP's pre-norm) and L + 1 plain RMSNorms (each attention pre-norm
    and the final norm); ANCRe also mixes j = 1..L states, timed at the measured j nearest the
    mean (L + 1) / 2. Estimates from isolated op timings at the step's
    token count (dense, MoD 0), so they ignore cache effects between ops.
    """
    n_layers = shapes.model["n_layers"]

    def fb(key: str) -> float:
        return ops[key]["eager"]["forward_backward_s"]

    j_mean = min(shapes.ancre_states, key=lambda j: abs(j - (n_layers + 1) / 2))
    norms = n_layers * fb("add_rmsnorm/fp32") + (n_layers + 1) * fb("rmsnorm/fp32")
    per_step = {
        "cascaded": norms,
        "nag": 2 * n_layers * fb("nag_epilogue/fp32"),
        "ancre": norms + n_layers * fb(f"ancre_mix_j{j_mean}/fp32"),
    }
    return {
        fam: {"op_seconds_per_step": s, "share_of_step": s / rows[f"{fam}/reference"]["median_step_s"]}
        for fam, s in per_step.items()
        if "median_step_s" in rows.get(f"{fam}/reference", {})
    }


def paths_and_backends(device: torch.device, reference_only: bool = False) -> tuple[list[str], list[str]]:
    """The op paths (triton, compile) and step backends (triton, reference) this device can run."""
    triton_runs = not reference_only and (device.type == "cuda" or interpreting())
    paths = (["triton"] if triton_runs else []) + (["compile"] if device.type == "cuda" else [])
    backends = (["triton"] if triton_runs else []) + ["reference"]
    return paths, backends


def time_ops(
    shapes: Shapes,
    dtypes: list[torch.dtype],
    device: torch.device,
    paths: list[str],
    peak: float | None,
    copy_peak: float | None,
) -> dict:
    """`time_op` of every op case and dtype, keyed `op/fp32` or `op/bf16`."""
    cases = {
        "nag_epilogue": nag_case,
        "add_rmsnorm": add_rmsnorm_case,
        "rmsnorm": rmsnorm_case,
        **{f"ancre_mix_j{j}": ancre_case(j) for j in shapes.ancre_states},
    }
    return {
        f"{name}/{str(dt).removeprefix('torch.').replace('float32', 'fp32').replace('bfloat16', 'bf16')}": time_op(
            name, case, shapes, dt, device, paths, peak, copy_peak
        )
        for name, case in cases.items()
        for dt in dtypes
    }


def verdicts(ops: dict, ratios: dict) -> dict:
    met = {}
    for key, row in ops.items():
        if "triton_speedup_vs_eager" in row:
            met[f"{key}/speedup_vs_eager"] = (
                row["triton_speedup_vs_eager"]["forward_backward_s"] >= TARGETS["op_speedup_vs_eager"]
            )
        share = row.get("triton", {}).get("forward_share_of_spec_peak")
        if share is not None:
            met[f"{key}/share_of_peak_bandwidth"] = share >= TARGETS["op_share_of_peak_bandwidth"]
    for key, value in ratios.items():
        if key.endswith("/triton") and "_vs_cascaded_" in key:
            met[key] = value <= TARGETS["family_vs_cascaded_step_time"]
        elif key.endswith("/triton") and "_mod0.25_vs_dense_" in key:
            met[key] = value <= TARGETS["mod0.25_vs_dense_step_time"]
    return met


def machine_info(device: torch.device) -> dict:
    """The harness's record of the machine, plus the device, Triton and (on CUDA) the GPU."""
    info = {
        **cpu_machine_info(),
        "device": str(device),
        "triton_interpreter": interpreting(),
        "triton": triton.__version__ if TRITON_AVAILABLE else None,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            gpu=props.name,
            gpu_memory_gib=props.total_memory / 2**30,
            cuda=torch.version.cuda,
            sm_count=props.multi_processor_count,
        )
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/gpu_kernels.json"))
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, one repeat: checks every path runs")
    parser.add_argument("--reference-only", action="store_true", help="skip the Triton path (CPU overhead run)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    device = torch.device(args.device)
    shapes = SMOKE if args.smoke else FULL if device.type == "cuda" else CPU
    paths, backends = paths_and_backends(device, args.reference_only)
    dtypes = [torch.float32] + ([torch.bfloat16] if device.type == "cuda" or args.smoke else [])
    peak, copy_peak = spec_sheet(device)[0], measured_copy_bandwidth(device)
    ops = time_ops(shapes, dtypes, device, paths, peak, copy_peak)
    families = time_families(shapes, device, backends)
    ratios = step_ratios(families, backends)
    result = {
        "machine": machine_info(device),
        "smoke": args.smoke,
        "paths": paths,
        "backends": backends,
        "shapes": asdict(shapes),
        "peak_bandwidth": {"spec_bytes_per_s": peak, "measured_copy_bytes_per_s": copy_peak},
        "ops": ops,
        "steps": families,
        "ratios": ratios,
        "reference_overhead": reference_overhead(ops, families, shapes),
        "targets": TARGETS,
        # a smoke run's or the interpreter's timings say nothing about a GPU: no verdicts then
        "targets_met": None if args.smoke or interpreting() else verdicts(ops, ratios),
    }
    write_json(args.out, result)
    for key, value in ratios.items():
        log.info("%s: %.3f", key, value)
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
