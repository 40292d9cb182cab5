"""The papers' claims, measured at small scale on the shipped corpus (each writes JSON and a PNG).

    python -m benchmarks.claims.paper_claims depth   # cascaded vs NAG vs ANCRe at 2, 4, 8, 16 layers, same compute
    python -m benchmarks.claims.paper_claims mod     # NAG at mod_rate 0, 0.125, 0.25, 0.5, same compute (iso-FLOP)
    python -m benchmarks.claims.paper_claims width   # d_align and p_hat versus d_model at fixed depth

Every trial is one `run_trial` at the same training budget (default 2e12 FLOPs, the default proxy
trial: 10-30 s here), the same seed, the same optimiser settings (no per-trial LR tuning: a
caveat when comparing sizes) and the same held-out set. Claims:
- depth: NAG's and ANCRe's gains over cascaded grow with depth (both papers);
- mod: a 20-25% MoD rate matches full depth under equal training compute (NAG paper);
- width: d_align grows with width and p_hat falls (effective-alignment-dimension paper).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks.harness import FAMILIES, machine_info  # noqa: E402
from search_spaces.residual_lm import flavour  # noqa: E402
from workers.data.config import DataConfig  # noqa: E402
from workers.data.corpus import load_corpus  # noqa: E402
from workers.trial.run import run_trial  # noqa: E402

log = logging.getLogger("paper_claims")
BASE = "bench"  # the default proxy trial's flavour (d 128, 4 layers, 4 heads, seq 128); knobs override it
SWEEPS = {
    "depth": [dict(residual=fam, n_layers=L) for L in (2, 4, 8, 16) for fam in FAMILIES],
    "mod": [dict(residual="nag", n_layers=8, mod_rate=r, mod_every=1) for r in (0.0, 0.125, 0.25, 0.5)],
    "width": [dict(residual="cascaded", d_model=d) for d in (32, 64, 128, 256)],
}


def run_sweep(name: str, budget: float, seed: int) -> list[dict]:
    corpus = load_corpus(DataConfig())
    rows = []
    for knobs in SWEEPS[name]:
        result = run_trial(flavour(BASE, **knobs), budget, corpus, seed=seed)
        row = {k: v for k, v in result.to_dict().items() if k not in ("curve", "optim")}
        rows.append({"knobs": knobs, **row})
        log.info(
            "%s: %s val_loss=%.4f tokens=%d wall=%.1fs",
            name,
            knobs,
            result.val_loss,
            result.tokens_seen,
            result.wall_time_s,
        )
    return rows


def summarise_depth(rows: list[dict]) -> dict:
    loss = {(r["knobs"]["residual"], r["knobs"]["n_layers"]): r["val_loss"] for r in rows}
    depths = sorted({L for _, L in loss})
    gain = {fam: {L: loss[("cascaded", L)] - loss[(fam, L)] for L in depths} for fam in ("nag", "ancre")}
    grows = {fam: g[depths[-1]] > g[depths[0]] and g[depths[-1]] > 0 for fam, g in gain.items()}
    return {"gain_over_cascaded_nats": gain, "gain_grows_with_depth": grows}


def summarise_mod(rows: list[dict]) -> dict:
    loss = {r["knobs"]["mod_rate"]: r["val_loss"] for r in rows}
    full = loss[0.0]
    return {
        "loss_minus_full_depth": {rate: value - full for rate, value in loss.items()},
        "tokens_seen": {r["knobs"]["mod_rate"]: r["tokens_seen"] for r in rows},
        "matches_full_depth_at_0.25": abs(loss[0.25] - full) <= 0.01,
    }


def summarise_width(rows: list[dict]) -> dict:
    d_align = {r["knobs"]["d_model"]: (r["width"] or {}).get("d_align", math.nan) for r in rows}
    p_hat = {r["knobs"]["d_model"]: (r["width"] or {}).get("p_hat_8_8", math.nan) for r in rows}
    widths = sorted(d_align)
    return {
        "d_align": d_align,
        "p_hat_8_8": p_hat,
        "d_align_grows": all(d_align[a] < d_align[b] for a, b in zip(widths, widths[1:], strict=False)),
        "p_hat_falls": p_hat[widths[-1]] < p_hat[widths[0]],
    }


def plot(name: str, rows: list[dict], path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    if name == "depth":
        for fam in FAMILIES:
            pts = sorted((r["knobs"]["n_layers"], r["val_loss"]) for r in rows if r["knobs"]["residual"] == fam)
            axes[0].plot(*zip(*pts, strict=True), marker="o", label=fam)
            toks = sorted((r["knobs"]["n_layers"], r["tokens_seen"]) for r in rows if r["knobs"]["residual"] == fam)
            axes[1].plot(*zip(*toks, strict=True), marker="o", label=fam)
        axes[0].set(xscale="log", xlabel="layers", ylabel="val loss (nats/byte)", title="same training compute")
        axes[1].set(xscale="log", yscale="log", xlabel="layers", ylabel="tokens trained", title="iso-FLOP token budget")
    elif name == "mod":
        pts = sorted(
            (r["knobs"]["mod_rate"], r["val_loss"], r["tokens_seen"], r["executed_flops_per_token"]) for r in rows
        )
        axes[0].plot([p[0] for p in pts], [p[1] for p in pts], marker="o")
        axes[0].set(xlabel="mod_rate", ylabel="val loss (nats/byte)", title="NAG, 8 layers, same training compute")
        axes[1].plot([p[0] for p in pts], [p[2] for p in pts], marker="o")
        axes[1].set(xlabel="mod_rate", ylabel="tokens trained", title="compute saved per token buys tokens")
    else:
        pts = sorted(
            (
                r["knobs"]["d_model"],
                (r["width"] or {}).get("d_align", math.nan),
                (r["width"] or {}).get("p_hat_8_8", math.nan),
            )
            for r in rows
        )
        axes[0].plot([p[0] for p in pts], [p[1] for p in pts], marker="o")
        axes[0].set(
            xscale="log", yscale="log", xlabel="d_model", ylabel="d_align", title="effective alignment dimension"
        )
        axes[1].plot([p[0] for p in pts], [p[2] for p in pts], marker="o")
        axes[1].set(xscale="log", xlabel="d_model", ylabel="p_hat(8, 8)", title="empirical misalignment")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


SUMMARIES = {"depth": summarise_depth, "mod": summarise_mod, "width": summarise_width}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sweep", choices=sorted(SWEEPS))
    parser.add_argument("--budget", type=float, default=2e12, help="training FLOPs per trial")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    rows = run_sweep(args.sweep, args.budget, args.seed)
    summary = SUMMARIES[args.sweep](rows)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = {
        "machine": machine_info(),
        "budget_flops": args.budget,
        "seed": args.seed,
        "base": flavour(BASE).model_dump(),
        "summary": summary,
        "trials": rows,
    }
    (args.out_dir / f"claims_{args.sweep}.json").write_text(json.dumps(out, indent=2, default=str))
    plot(args.sweep, rows, args.out_dir / f"claims_{args.sweep}.png")
    log.info("summary: %s", json.dumps(summary, default=str))


if __name__ == "__main__":
    main()
