"""CPU training throughput of each residual family beside a minimal nanoGPT-style reference.

One run measures, side by side and interleaved (so machine noise hits every model alike):
- the machine's fp32 matmul peak (best GFLOP/s of square torch.mm over a few sizes);
- step time (forward + backward + AdamW) of the reference GPT (nanoGPT's architecture), of a plain
  LLaMA-style reference with `cascaded`'s architecture (RMSNorm, RoPE, SwiGLU; tells implementation
  overhead from architecture cost) and of each residual_lm variant
  at d_model 128, 4 layers, 4 heads, seq 128, batch 16, byte vocabulary;
- tokens/s, ratio to the reference, step-time ratios (NAG and ANCRe vs cascaded, MoD at 0.25 vs
  dense per family, routed per sublayer and per block, and cascaded at MoD rates 0.125-0.875 beside
  the share of training FLOPs each executes),
  and achieved GFLOP/s as a share of the measured peak, with FLOPs = 3 x executed forward FLOPs
  (docs/design.md §3.5: matmuls only, attention over causal keys).

    python -m benchmarks.speed.cpu_throughput --out benchmarks/results/cpu_throughput.json
    python -m benchmarks.speed.cpu_throughput --threads 1 --out benchmarks/results/cpu_throughput_1thread.json
    python -m benchmarks.speed.cpu_throughput --only families   # the references, cascaded and NAG alone

(`--threads 1` is how a search's workers train: one torch thread per trial, one trial per core.)
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from benchmarks.harness import (
    BATCH,
    FAMILIES,
    MOD_RATES,
    SIZE,
    VARIANTS,
    machine_info,
    make_step,
    time_interleaved,
    update_json,
    write_json,
)
from search_spaces.residual_lm import (
    TRAINING_FLOPS_PER_FORWARD_FLOP,
    ArchConfig,
    build_model,
    training_flops,
)
from search_spaces.residual_lm.common import apply_rope, rope_frequencies

log = logging.getLogger("cpu_throughput")

TARGETS = {
    "cascaded_vs_reference_tokens_per_s": 1.0,  # at least
    "nag_vs_cascaded_step_time": 1.10,  # at most
    "ancre_vs_cascaded_step_time": 1.05,  # at most
    "mod0.25_vs_dense_step_time": 0.85,  # at most, per family
    "fp32_share_of_matmul_peak": 0.60,  # at least
}


class ReferenceGPT(nn.Module):
    """nanoGPT's model at the same size: learned positions, LayerNorm, GELU MLP (4d), tied head."""

    def __init__(self, vocab: int, seq_len: int, n_layers: int, d: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq_len, d)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                dict(
                    ln1=nn.LayerNorm(d),
                    qkv=nn.Linear(d, 3 * d),
                    proj=nn.Linear(d, d),
                    ln2=nn.LayerNorm(d),
                    fc=nn.Linear(d, 4 * d),
                    out=nn.Linear(4 * d, d),
                )
            )
            for _ in range(n_layers)
        )
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            q, k, v = b["qkv"](b["ln1"](x)).view(B, T, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
            x = x + b["proj"](F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, -1))
            x = x + b["out"](F.gelu(b["fc"](b["ln2"](x))))
        return self.ln_f(x) @ self.wte.weight.T

    def forward_flops_per_token(self, seq_len: int) -> float:
        """2 per matmul weight (positions and token embedding excluded, tied head counted) + attention core."""
        d = self.wte.weight.shape[1]
        weights = sum(p.numel() for n, p in self.named_parameters() if p.dim() == 2 and not n.startswith("wpe"))
        return 2 * weights + len(self.blocks) * 4 * d * (seq_len + 1) / 2


class ReferenceLlama(nn.Module):
    """The same architecture as `cascaded`, written plainly: RMSNorm (torch's), RoPE, SwiGLU, untied head,
    no routers, no dispatch, no custom autograd. Beside it, `cascaded`'s step time is implementation
    overhead; beside nanoGPT's, this one's is the cost of the architecture."""

    def __init__(self, cfg: ArchConfig):
        super().__init__()
        d, h = cfg.d_model, cfg.mlp_hidden
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.emb = nn.Embedding(cfg.vocab_size, d)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                dict(
                    n1=nn.RMSNorm(d, eps=1e-6),
                    qkv=nn.Linear(d, 3 * d, bias=False),
                    o=nn.Linear(d, d, bias=False),
                    n2=nn.RMSNorm(d, eps=1e-6),
                    w_in=nn.Linear(d, 2 * h, bias=False),
                    w_out=nn.Linear(h, d, bias=False),
                )
            )
            for _ in range(cfg.n_layers)
        )
        self.norm = nn.RMSNorm(d, eps=1e-6)
        self.head = nn.Linear(d, cfg.vocab_size, bias=False)
        self.register_buffer("freqs", rope_frequencies(cfg.seq_len, cfg.head_dim), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        B, T = idx.shape
        x = self.emb(idx)
        freqs = self.freqs[:T, None]
        for b in self.blocks:
            q, k, v = b["qkv"](b["n1"](x)).view(B, T, 3, self.n_heads, self.head_dim).unbind(2)
            q, k = apply_rope(q, freqs).transpose(1, 2), apply_rope(k, freqs).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v.transpose(1, 2), is_causal=True)
            x = x + b["o"](y.transpose(1, 2).reshape(B, T, -1))
            gate, up = b["w_in"](b["n2"](x)).chunk(2, dim=-1)
            x = x + b["w_out"](F.silu(gate) * up)
        return self.head(self.norm(x))


def matmul_peak_gflops(sizes=(512, 1024, 2048), repeats: int = 5) -> dict:
    """Best fp32 GFLOP/s of torch.mm on n x n matrices."""
    best = {}
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.mm(a, b)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - start)
        best[n] = 2 * n**3 / min(times) / 1e9
    return {"gflops": max(best.values()), "by_size": best}


def build_models(names: tuple[str, ...] | None = None) -> tuple[dict, dict]:
    """The models to time (all, or those `names`) and their training FLOPs per token."""
    models, train_flops = {}, {}
    torch.manual_seed(0)
    ref = ReferenceGPT(SIZE["vocab_size"], SIZE["seq_len"], SIZE["n_layers"], SIZE["d_model"], SIZE["n_heads"])
    models["reference_gpt"], train_flops["reference_gpt"] = (
        ref,
        (TRAINING_FLOPS_PER_FORWARD_FLOP * ref.forward_flops_per_token(SIZE["seq_len"])),
    )
    plain = ArchConfig(**SIZE)
    models["reference_llama"], train_flops["reference_llama"] = ReferenceLlama(plain), training_flops(plain, 1)
    for name, knobs in VARIANTS.items():
        cfg = ArchConfig(**SIZE, **knobs)
        models[name], train_flops[name] = build_model(cfg).train(), training_flops(cfg, 1)
    if names is not None:
        return {n: models[n] for n in names}, {n: train_flops[n] for n in names}
    return models, train_flops


def summarise(times: dict, train_flops: dict, models: dict, peak: float) -> dict:
    tokens_per_step = BATCH * SIZE["seq_len"]
    rows = {}
    for name, ts in times.items():
        median = statistics.median(ts)
        gflops = train_flops[name] * tokens_per_step / median / 1e9
        rows[name] = {
            "median_step_s": median,
            "min_step_s": min(ts),
            "tokens_per_s": tokens_per_step / median,
            "train_flops_per_token": train_flops[name],
            "gflops": gflops,
            "share_of_peak": gflops / peak,
            "params": sum(p.numel() for p in models[name].parameters()),
        }
    step = {n: r["median_step_s"] for n, r in rows.items()}
    ratios = {
        "cascaded_vs_reference_tokens_per_s": step["reference_gpt"] / step["cascaded"],
        "cascaded_vs_reference_llama_tokens_per_s": step["reference_llama"] / step["cascaded"],
        "reference_llama_vs_reference_gpt_tokens_per_s": step["reference_gpt"] / step["reference_llama"],
        "nag_vs_cascaded_step_time": step["nag"] / step["cascaded"],
        "ancre_vs_cascaded_step_time": step["ancre"] / step["cascaded"],
        **{
            f"{fam}_mod0.25{suffix}_vs_dense_step_time": step[f"{fam}_mod0.25{suffix}"] / step[fam]
            for fam in FAMILIES
            for suffix in ("", "_block")
        },
        "fp32_share_of_matmul_peak": rows["cascaded"]["share_of_peak"],
    }
    sweep = {
        f"{rate}{suffix}": {
            "step_time_vs_dense": step[f"cascaded_mod{rate}{suffix}"] / step["cascaded"],
            "train_flops_vs_dense": rows[f"cascaded_mod{rate}{suffix}"]["train_flops_per_token"]
            / rows["cascaded"]["train_flops_per_token"],
        }
        for rate in MOD_RATES
        for suffix in ("", "_block")
    }
    return {"models": rows, "ratios": ratios, "cascaded_mod_sweep": sweep}


def verdicts(ratios: dict) -> dict:
    met = {}
    for key, target in TARGETS.items():
        if key == "mod0.25_vs_dense_step_time":
            for fam in FAMILIES:
                met[f"{fam}_{key}"] = ratios[f"{fam}_{key}"] <= target
                met[f"{fam}_mod0.25_block_vs_dense_step_time"] = (
                    ratios[f"{fam}_mod0.25_block_vs_dense_step_time"] <= target
                )
        elif key.endswith("step_time"):
            met[key] = ratios[key] <= target
        else:
            met[key] = ratios[key] >= target
    return met


FAMILY_STEPS = ("reference_gpt", "reference_llama", "cascaded", "nag")


def time_families(out: Path, rounds: int, warmup: int, runs: int = 3) -> None:
    """The references, cascaded and NAG alone, interleaved, `runs` times: each run's step-time medians and the
    ratios the targets name, their median over the runs, and the machine with its load, written into `out` under
    "families" (the rest of the file stays)."""
    models, _ = build_models(FAMILY_STEPS)
    steps = {n: make_step(m) for n, m in models.items()}
    measured = []
    for run in range(runs):
        times = time_interleaved(steps, rounds, 1, warmup)
        step = {name: statistics.median(t) for name, t in times.items()}
        ratios = {
            "nag_vs_cascaded_step_time": step["nag"] / step["cascaded"],
            "cascaded_vs_reference_llama_tokens_per_s": step["reference_llama"] / step["cascaded"],
            "cascaded_vs_reference_tokens_per_s": step["reference_gpt"] / step["cascaded"],
        }
        measured.append({"median_step_s": step, "ratios": ratios})
        log.info("run %d: %s", run + 1, {k: f"{v:.3f}" for k, v in ratios.items()})
    median = {k: statistics.median(m["ratios"][k] for m in measured) for k in measured[0]["ratios"]}
    update_json(out, "families", {"rounds": rounds, "runs": measured, "ratios": median, "machine": machine_info()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/cpu_throughput.json"))
    # one step per model per round: a round takes seconds, not the 20 s of 5 steps x 19 models, so a drift
    # of the machine's speed lands on every model alike (at 1 thread, MoD 0.25 over dense measured
    # 0.97-1.04 with 5 steps per round, 0.90-0.92 with 1, and 0.87 with only dense and MoD alternating)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--per-round", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's; a search's workers run 1 each)"
    )
    parser.add_argument("--only", choices=["families"], help="time only the references, cascaded and NAG")
    parser.add_argument("--runs", type=int, default=3, help="with --only families: runs, their median reported")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.only == "families":
        return time_families(args.out, args.rounds, args.warmup, args.runs)
    peak = matmul_peak_gflops()
    log.info("fp32 matmul peak: %.1f GFLOP/s", peak["gflops"])
    models, train_flops = build_models()
    times = time_interleaved({n: make_step(m) for n, m in models.items()}, args.rounds, args.per_round, args.warmup)
    result = summarise(times, train_flops, models, peak["gflops"])
    result.update(
        machine=machine_info(),
        matmul_peak=peak,
        size={**SIZE, "batch": BATCH},
        targets=TARGETS,
        targets_met=verdicts(result["ratios"]),
    )
    write_json(args.out, result)
    for k, v in result["ratios"].items():
        log.info("%-42s %.3f", k, v)
    log.info("targets met: %s", result["targets_met"])


if __name__ == "__main__":
    main()
