"""Mixture-of-Depths as published (blocks routed at 0.875) vs per-sublayer routing at 0.25, at equal compute.

    python -m benchmarks.claims.mod_published --out benchmarks/results/mod_published.json   # ~10 min here
    python -m benchmarks.claims.mod_published --smoke --out /tmp/mod.json                   # every path, tiny

For each residual family, at 8 layers of the `bench` flavour (d 128, 4 heads, seq 128) and one
training budget (default 2e12 FLOPs: the default proxy trial), three settings are trained with
`workers.trial.run.run_trial` (iso-FLOP: a setting that executes fewer FLOPs per token trains on more
tokens), with the same optimiser settings and held-out set, for two seeds:

- dense: no routing;
- sublayer 0.25: attention and MLP each skip 25% of tokens on every other block, each deciding
  apart (`mod_granularity="sublayer"`);
- block 0.875: the MoD paper's best setting (Raposo et al. 2024, arXiv 2404.02258): whole blocks
  routed at 12.5% capacity on every other block (`mod_granularity="block"`, `mod_every=2`), decided
  causally by a threshold carried in from earlier batches (this project's rule);
- block 0.875 predictor: the same, decided as the paper does: top-k per sequence in training and
  its auxiliary causal predictor at evaluation (`mod_routing="predictor"`). Beside the threshold
  rule it answers "which causal decision": realised skip rate at evaluation and loss.

Reported per run: validation loss, tokens trained, executed FLOPs per token, the realised skip rate of
the routers (last evaluation) and wall time; per setting: the mean loss and its gap to dense, against
the seed spread. The verdict per family says whether the paper's setting beats dense and 0.25 per
sublayer by more than twice the seed noise. Jobs run in 2 processes of 1 torch thread each.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import statistics
import time
from pathlib import Path

from benchmarks.harness import FAMILIES, machine_info, write_json

SETTINGS = {
    "dense": dict(mod_rate=0.0),
    "sublayer_0.25": dict(mod_rate=0.25, mod_every=2, mod_granularity="sublayer"),
    "block_0.875": dict(mod_rate=0.875, mod_every=2, mod_granularity="block"),
    "block_0.875_predictor": dict(mod_rate=0.875, mod_every=2, mod_granularity="block", mod_routing="predictor"),
}
SEEDS = (0, 1)


def run_one(job: tuple[str, str, int, float, bool]) -> dict:
    import torch

    from search_spaces.residual_lm import flavour, flops_per_token
    from workers.data.config import DataConfig
    from workers.data.corpus import load_corpus
    from workers.training.config import RunConfig
    from workers.trial.run import run_trial

    torch.set_num_threads(1)
    family, setting, seed, budget, smoke = job
    size = dict(n_layers=2, d_model=32, n_heads=2, seq_len=32) if smoke else dict(n_layers=8)
    cfg = flavour("bench", residual=family, **size, **SETTINGS[setting])
    run = RunConfig(eval_sequences=16, evals=1) if smoke else RunConfig(eval_sequences=256, evals=1)
    result = run_trial(cfg, budget, load_corpus(DataConfig()), seed=seed, run=run, width_probe=False)
    skip = (result.diagnostics or {}).get("skip_rate") or {}
    return {
        "family": family,
        "setting": setting,
        "seed": seed,
        "status": str(result.status),
        "val_loss": result.val_loss,
        "tokens_seen": result.tokens_seen,
        "executed_flops_per_token": flops_per_token(cfg).executed,
        "realised_skip_rate": statistics.fmean(skip.values()) if skip else 0.0,
        "wall_time_s": result.wall_time_s,
    }


def summarise(rows: list[dict]) -> dict:
    """Per family: mean loss per setting, its gap to dense, the pooled seed sd, and the verdict."""
    out = {}
    for family in FAMILIES:
        mine = [r for r in rows if r["family"] == family and math.isfinite(r["val_loss"])]
        by = {s: [r["val_loss"] for r in mine if r["setting"] == s] for s in SETTINGS}
        if not all(by.values()):
            continue
        mean = {s: statistics.fmean(v) for s, v in by.items()}
        pairs = [v for v in by.values() if len(v) >= 2]
        noise = (
            math.sqrt(sum(statistics.variance(v) * (len(v) - 1) for v in pairs) / sum(len(v) - 1 for v in pairs))
            if pairs
            else None
        )
        gap = {s: mean[s] - mean["dense"] for s in SETTINGS}
        paper, sublayer = mean["block_0.875"], mean["sublayer_0.25"]
        margin = 2 * noise if noise is not None else 0.0
        if paper < min(mean["dense"], sublayer) - margin:
            verdict = "the paper's setting wins: lower loss than dense and 0.25 per sublayer at equal compute"
        elif paper > mean["dense"] + margin:
            verdict = "dense wins: the paper's setting loses at this scale and budget"
        else:
            verdict = (
                "no clear winner: the paper's setting is within twice the seed noise of dense or of 0.25 per sublayer"
            )
        threshold_vs_predictor = {
            "val_loss": {"threshold": mean["block_0.875"], "predictor": mean["block_0.875_predictor"]},
        }
        out[family] = {
            "causal_decision": threshold_vs_predictor,
            "mean_val_loss": mean,
            "gap_to_dense": gap,
            "seed_noise": noise,
            "realised_skip_rate": {
                s: statistics.fmean(r["realised_skip_rate"] for r in mine if r["setting"] == s) for s in SETTINGS
            },
            "tokens_seen": {s: statistics.fmean(r["tokens_seen"] for r in mine if r["setting"] == s) for s in SETTINGS},
            "verdict": verdict,
        }
    return out


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.2
    for k, setting in enumerate(SETTINGS):
        gaps = [summary[f]["gap_to_dense"][setting] if f in summary else math.nan for f in FAMILIES]
        ax.bar([i + (k - 1.5) * width for i in range(len(FAMILIES))], gaps, width, label=setting)
    for i, f in enumerate(FAMILIES):
        noise = (summary.get(f) or {}).get("seed_noise")
        if noise:
            ax.errorbar(i, 0, yerr=2 * noise, color="k", capsize=4)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(range(len(FAMILIES)), FAMILIES)
    ax.set(ylabel="val loss minus dense (nats/token)", title="MoD at equal training compute (bar at 0: 2x seed sd)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=2e12, help="training FLOPs per run")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/mod_published.json"))
    parser.add_argument("--smoke", action="store_true", help="tiny model and budget: every path, no meaning")
    args = parser.parse_args()
    budget = 3e8 if args.smoke else args.budget
    jobs = [(f, s, seed, budget, args.smoke) for f in FAMILIES for s in SETTINGS for seed in SEEDS]
    start = time.perf_counter()
    with mp.get_context("spawn").Pool(2) as pool:
        rows = pool.map(run_one, jobs)
    summary = summarise(rows)
    out = {
        "machine": machine_info(),
        "budget_flops": budget,
        "build_seconds": time.perf_counter() - start,
        "summary": summary,
        "runs": rows,
    }
    write_json(args.out, out)
    plot(summary, args.out.with_suffix(".png"))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
