"""ANCRe case study (paper 2602.09009, Sec. 3, Sec. 4.1, App. C.4 / E.1, Fig. 2).

Deep *linear* networks with residual shortcuts, trained by plain full-batch GD.

Maths
-----
Data: d = n = 50, X = I_d (whitened inputs, X X^T = I), so A := Y X^T = Y.
Target A = G1 G2^T / sqrt(r) with G1, G2 in R^{d x r} i.i.d. N(0, 1) and r = 4
(rank 4, every entry marginally a standard Gaussian).

Network with K layers W_1..W_K in R^{d x d}, W_k(0) i.i.d. N(0, 1e-4) (std 1e-2).
A shortcut i:j (0 <= i < j <= K) adds the output of layer i (node 0 = input X)
to the output of layer j.  With a coefficient matrix P (P[i, j] = p_ij):

    h_0 = X,    h_j = W_j h_{j-1} + sum_{i<j} p_ij h_i,   f(X) = h_K,
    L = 1/2 || h_K - Y ||_F^2.

Fixed topologies use p_ij in {0, 1}, e.g. 0:1 -> W3 W2 (W1 + I) X and
0:2 -> W3 (W2 W1 + I) X; 0:2+2:3 (K=4) -> W4 (W3 + I)(W2 W1 + I) X;
"cascaded" (standard ResNet, all j-1:j) -> (W_K + I) ... (W_1 + I) X.

ANCRe (Sec. 4.1, eqs. (6)-(7), Fig. 3(c)) keeps *every* shortcut i:j with a
learnable logit c_ij and *ingoing* normalisation
    p_ij = exp(c_ij / tau) / sum_{k=0}^{j-1} exp(c_kj / tau),
so the coefficients entering each node j sum to one; in particular node 1 has
a single candidate and p_01 = 1 is forced (the 0:1 shortcut is always on).
Logits start equal (zero).  h_j = W_j h_{j-1} + sum_i p_ij h_i is our reading
of "if p_ij = 1 the construction reduces to a standard residual connection",
and it is exactly what the authors' public module
(`AdaptiveNeuralConnectionReassign`: hidden = block(hidden) + sum_i p_i h_i,
zero-initialised logits, frozen first logit) computes.  The logits are trained
by the same GD (same step) jointly with the weights.  tau: the paper uses 0.01
for LMs (also the module default) and 0.01 / 0.1 elsewhere; no value is given
for the LNN, so both are run (tau enters the logit step as lr / tau^2).

Theory being checked: 0:1 converges at best sublinearly,
L >= Omega(t^{-(K-1)/(K-2)}) (= t^{-2} for K=3), while 0:2 (K=3) / 0:K-1
converge linearly (log L falls linearly in t).  Gradients via float64 autograd;
all variants of one K share the same A and the same initial W_k.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import time
from pathlib import Path

import numpy as np
import torch

from cpu_throughput import machine_info  # the machine record every benchmark writes

LOG = logging.getLogger("ancre_case_study")

D = 50
RANK = 4
INIT_STD = 1e-2
LR = 1e-3
DATA_SEED = 0
WEIGHT_SEED = 1
TAUS = (0.01, 0.1)
FIXED_VARIANTS = {
    3: {"0:1": [(0, 1)], "0:2": [(0, 2)], "cascaded": [(0, 1), (1, 2), (2, 3)]},
    4: {
        "0:1": [(0, 1)],
        "0:2": [(0, 2)],
        "0:3": [(0, 3)],
        "0:2+2:3": [(0, 2), (2, 3)],
        "cascaded": [(0, 1), (1, 2), (2, 3), (3, 4)],
    },
}
FAST_VARIANT = {3: "0:2", 4: "0:3"}  # 0:K-1, the paper's provably linear case
SLOW_VARIANT = "0:1"
NUMERIC_FLOOR_REL = 1e-25  # ignore points below this relative loss in fits


def make_problem() -> tuple[torch.Tensor, torch.Tensor]:
    """Whitened input X = I and rank-r Gaussian target A = Y."""
    gen = torch.Generator().manual_seed(DATA_SEED)
    g1 = torch.randn(D, RANK, generator=gen, dtype=torch.float64)
    g2 = torch.randn(D, RANK, generator=gen, dtype=torch.float64)
    target = g1 @ g2.T / math.sqrt(RANK)
    return torch.eye(D, dtype=torch.float64), target


def init_weights(depth: int) -> list[torch.Tensor]:
    """W_k(0) ~ N(0, INIT_STD^2), identical for every variant of a given depth."""
    gen = torch.Generator().manual_seed(WEIGHT_SEED + 100 * depth)
    return [(INIT_STD * torch.randn(D, D, generator=gen, dtype=torch.float64)).requires_grad_() for _ in range(depth)]


def fixed_coefficients(depth: int, shortcuts: list[tuple[int, int]]) -> torch.Tensor:
    """Constant 0/1 shortcut matrix P[i, j] for a hand-designed topology."""
    coeffs = torch.zeros(depth + 1, depth + 1, dtype=torch.float64)
    for i, j in shortcuts:
        coeffs[i, j] = 1.0
    return coeffs


def ingoing_softmax(logits: torch.Tensor, tau: float) -> torch.Tensor:
    """p_ij = softmax_{i<j}(c_ij / tau) column-wise; zero on and below the diagonal."""
    size = logits.shape[0]
    mask = torch.triu(torch.ones(size, size, dtype=torch.bool), diagonal=1)
    scaled = torch.where(mask, logits / tau, torch.full_like(logits, -math.inf))
    probs = torch.softmax(scaled[:, 1:], dim=0)  # column 0 (the input) has no inputs
    return torch.cat([torch.zeros_like(logits[:, :1]), probs], dim=1)


def forward_loss(weights, coeffs, inputs, target, skip_zero: bool) -> torch.Tensor:
    """L = 1/2 ||h_K - Y||^2 with h_j = W_j h_{j-1} + sum_{i<j} P[i,j] h_i."""
    hidden = [inputs]
    for j, weight in enumerate(weights, start=1):
        out = weight @ hidden[-1]
        for i in range(j):
            if skip_zero and coeffs[i, j] == 0:
                continue
            out = out + coeffs[i, j] * hidden[i]
        hidden.append(out)
    return 0.5 * (hidden[-1] - target).pow(2).sum()


def log_grid(steps: int, n_log: int = 120, n_lin: int = 100) -> set[int]:
    """Union of a log-spaced and a regular grid of GD steps (always incl. 0 and steps)."""
    log_pts = np.unique(np.round(np.logspace(0, math.log10(max(steps, 1)), n_log)))
    lin_pts = np.round(np.linspace(0, steps, n_lin + 1))
    return {0, steps} | {int(s) for s in log_pts} | {int(s) for s in lin_pts}


def train(depth: int, inputs, target, steps: int, coeffs=None, tau=None) -> dict:
    """Full-batch GD with fixed step LR; ANCRe when coeffs is None (logits learned)."""
    weights = init_weights(depth)
    logits = None
    if coeffs is None:
        logits = torch.zeros(depth + 1, depth + 1, dtype=torch.float64, requires_grad=True)
    params = weights + ([logits] if logits is not None else [])
    grid, curve, hits, loss0 = log_grid(steps), ([], []), {}, None
    for step in range(steps + 1):
        probs = ingoing_softmax(logits, tau) if logits is not None else coeffs
        loss = forward_loss(weights, probs, inputs, target, skip_zero=logits is None)
        value = loss.item()
        loss0 = value if loss0 is None else loss0
        if not math.isfinite(value):
            raise FloatingPointError(f"K={depth} diverged at step {step}")
        for key, frac in (("1e-2", 1e-2), ("1e-4", 1e-4)):
            if key not in hits and value <= frac * loss0:
                hits[key] = step
        if step in grid:
            curve[0].append(step)
            curve[1].append(value)
        if step == steps:
            break
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for param, grad in zip(params, grads, strict=True):
                param -= LR * grad
    final_p = ingoing_softmax(logits, tau).detach() if logits is not None else coeffs
    return {
        "steps": curve[0],
        "losses": curve[1],
        "initial_loss": loss0,
        "final_loss": curve[1][-1],
        "final_relative_loss": curve[1][-1] / loss0,
        "steps_to_1e-2_rel": hits.get("1e-2"),
        "steps_to_1e-4_rel": hits.get("1e-4"),
        "p_matrix": final_p.tolist(),
    }


def _window(run: dict, t_lo: float, t_hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Logged (step, loss) pairs in [t_lo, t_hi] above the float64 floor."""
    steps = np.asarray(run["steps"], dtype=float)
    losses = np.asarray(run["losses"], dtype=float)
    keep = (steps >= t_lo) & (steps <= t_hi) & (steps > 0)
    keep &= losses > NUMERIC_FLOOR_REL * run["initial_loss"]
    return steps[keep], losses[keep]


def _linfit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope and R^2 of y against x."""
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    total = float(np.sum((y - y.mean()) ** 2))
    return float(slope), (1.0 - float(np.sum(resid**2)) / total) if total > 0 else 1.0


def tail_start(run: dict, total_steps: int) -> float:
    """Start of the 'tail': after the last decade begins and after the fast drop."""
    hit = run["steps_to_1e-4_rel"]
    return max(total_steps / 10, 2.0 * hit if hit is not None else 0.0)


def fit_rates(run: dict, total_steps: int) -> dict:
    """Log-log slope on the tail and log-linear decay rate after reaching 1e-4 L(0)."""
    t0 = tail_start(run, total_steps)
    x, y = _window(run, t0, total_steps)
    fits = {"tail_window": [t0, float(total_steps)], "loglog_slope": None, "loglog_r2": None}
    if len(x) >= 5:
        fits["loglog_slope"], fits["loglog_r2"] = _linfit(np.log(x), np.log(y))
    lin_lo = run["steps_to_1e-4_rel"] if run["steps_to_1e-4_rel"] is not None else t0
    x, y = _window(run, lin_lo, total_steps)
    fits["loglinear_window"] = [float(lin_lo), float(x[-1]) if len(x) else None]
    fits["loglinear_decades_per_1k_steps"], fits["loglinear_r2"] = None, None
    if len(x) >= 5:
        slope, r2 = _linfit(x, np.log10(y))
        fits["loglinear_decades_per_1k_steps"], fits["loglinear_r2"] = -1e3 * slope, r2
    return fits


def gap_verdict(depth: int, runs: dict) -> dict:
    """Exponential-gap criterion for one depth (see summary text)."""
    slow, fast = runs[SLOW_VARIANT], runs[FAST_VARIANT[depth]]
    slow_slope = slow["fits"]["loglog_slope"]
    fast_r2 = fast["fits"]["loglinear_r2"]
    fast_rate = fast["fits"]["loglinear_decades_per_1k_steps"]
    ratio = fast["final_loss"] / slow["final_loss"]
    ok = (
        slow_slope is not None
        and slow_slope >= -2.0
        and fast_r2 is not None
        and fast_r2 >= 0.95
        and fast_rate > 0
        and fast["fits"]["loglog_slope"] is not None
        and fast["fits"]["loglog_slope"] <= -10
        and ratio <= 1e-6
    )
    return {
        "reproduced": bool(ok),
        "slow_variant": SLOW_VARIANT,
        "fast_variant": FAST_VARIANT[depth],
        "slow_tail_loglog_slope": slow_slope,
        "theory_slow_exponent_bound": -(depth - 1) / (depth - 2),
        "fast_loglinear_decades_per_1k_steps": fast_rate,
        "fast_loglinear_r2": fast_r2,
        "fast_tail_loglog_slope": fast["fits"]["loglog_slope"],
        "final_loss_ratio_fast_over_slow": ratio,
    }


def ancre_verdict(depth: int, runs: dict) -> dict:
    """Does ANCRe reach the fast fixed topology's loss, and what did it learn?"""
    fast = runs[FAST_VARIANT[depth]]
    out = {}
    for name, run in runs.items():
        if not name.startswith("ANCRe"):
            continue
        probs = np.asarray(run["p_matrix"])
        dominant = [f"{int(np.argmax(probs[:j, j]))}:{j}" for j in range(1, depth + 1)]
        out[name] = {
            "dominant_ingoing_shortcuts": dominant,
            "final_loss_over_fast": run["final_loss"] / fast["final_loss"],
            "final_loss_over_cascaded": run["final_loss"] / runs["cascaded"]["final_loss"],
            "matches_fast_variant": bool(run["final_loss"] <= 10 * fast["final_loss"]),
        }
    return out


def _num(value, spec: str) -> str:
    """Format a fitted number, or 'n/a' when a short run had too few points to fit."""
    return "n/a" if value is None else format(value, spec)


def summary_text(gaps: dict, ancre: dict) -> str:
    """One-paragraph plain-text verdict."""
    parts = [
        "Criterion per K: the 0:1 network's log-log slope of L(t) on its tail "
        "(t from max(N/10, 2*t_{1e-4}) to N) must be >= -2 (no faster than the "
        "Omega(1/t^2) bound), while the 0:K-1 network's log10 L(t) must fall linearly "
        "in t after reaching 1e-4 L(0) (R^2 >= 0.95, positive rate), be far steeper than "
        "any low-order power law on the same tail (log-log slope <= -10), and end >= 6 "
        "decades below 0:1."
    ]
    for depth, gap in gaps.items():
        parts.append(
            f"K={depth}: {'REPRODUCED' if gap['reproduced'] else 'NOT reproduced'} -- "
            f"0:1 tail slope {_num(gap['slow_tail_loglog_slope'], '.3f')} (bound exponent "
            f"{_num(gap['theory_slow_exponent_bound'], '.2f')}); {gap['fast_variant']} falls "
            f"{_num(gap['fast_loglinear_decades_per_1k_steps'], '.3f')} decades/1k steps "
            f"(R^2 {_num(gap['fast_loglinear_r2'], '.4f')}, tail log-log slope "
            f"{_num(gap['fast_tail_loglog_slope'], '.1f')}); final-loss ratio "
            f"{_num(gap['final_loss_ratio_fast_over_slow'], '.2e')}."
        )
    for depth, per_tau in ancre.items():
        for name, info in per_tau.items():
            parts.append(
                f"K={depth} {name}: learned dominant shortcuts "
                f"{'+'.join(info['dominant_ingoing_shortcuts'])}, final loss "
                f"{info['final_loss_over_fast']:.2e}x the fast variant's and "
                f"{info['final_loss_over_cascaded']:.2f}x cascaded's "
                f"({'matches' if info['matches_fast_variant'] else 'does NOT match'} the fast topology)."
            )
    parts.append(
        "Note: ingoing normalisation gives every node, including the output node K, "
        "shortcuts that sum to 1, so ANCRe starts from f(X) ~ X and cannot express a "
        "layout with no shortcut into node K (0:2 for K=3, 0:3 or 0:2+2:3 for K=4); "
        "whenever it settles on the cascaded layout, it inherits that layout's sublinear tail."
    )
    return " ".join(parts)


def run_depth(depth: int, inputs, target, steps: int) -> dict:
    """All fixed topologies plus ANCRe (both taus) for one depth."""
    runs = {}
    for name, shortcuts in FIXED_VARIANTS[depth].items():
        start = time.perf_counter()
        runs[name] = train(depth, inputs, target, steps, fixed_coefficients(depth, shortcuts))
        runs[name]["shortcuts"] = [f"{i}:{j}" for i, j in shortcuts]
        runs[name]["seconds"] = time.perf_counter() - start
        LOG.info("K=%d %-9s final loss %.3e (%.1fs)", depth, name, runs[name]["final_loss"], runs[name]["seconds"])
    for tau in TAUS:
        name, start = f"ANCRe(tau={tau:g})", time.perf_counter()
        runs[name] = train(depth, inputs, target, steps, tau=tau)
        runs[name]["seconds"] = time.perf_counter() - start
        LOG.info("K=%d %-9s final loss %.3e (%.1fs)", depth, name, runs[name]["final_loss"], runs[name]["seconds"])
    for run in runs.values():
        run["fits"] = fit_rates(run, steps)
    return runs


def plot(results: dict, path: Path) -> None:
    """Two panels (K=3, K=4): loss vs GD step, log y."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for ax, (depth, runs) in zip(axes, results.items(), strict=True):
        for name, run in runs.items():
            style = "--" if name.startswith("ANCRe") else "-"
            ax.plot(run["steps"], run["losses"], style, lw=1.6, label=name)
        ax.set_yscale("log")
        ax.set_xlabel("GD step (lr = 1e-3)")
        ax.set_ylabel(r"loss $\frac{1}{2}\|f(X)-Y\|_F^2$")
        ax.set_title(f"K = {depth}-layer linear net, d = n = {D}, rank(A) = {RANK}")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("ANCRe case study (paper Fig. 2): residual topology vs. GD convergence")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def settings(steps: int) -> dict:
    return {
        "d": D,
        "n": D,
        "rank": RANK,
        "X": "identity (whitened, X X^T = I)",
        "target": "A = G1 G2^T / sqrt(r), G1, G2 ~ N(0,1)^{d x r}",
        "init": f"W_k ~ N(0, {INIT_STD**2:g}) (std {INIT_STD:g}), shared across variants",
        "optimizer": f"full-batch GD, fixed step {LR:g} on weights and ANCRe logits",
        "steps": steps,
        "dtype": "float64",
        "data_seed": DATA_SEED,
        "weight_seed": f"{WEIGHT_SEED} + 100*K",
        "ancre_taus": list(TAUS),
        "ancre_normalisation": "ingoing softmax over i<j, logits init 0 (p_01 = 1 forced)",
        "layer_rule": "h_j = W_j h_{j-1} + sum_{i<j} p_ij h_i, f = h_K",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20000, help="GD steps per run")
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    inputs, target = make_problem()
    results = {depth: run_depth(depth, inputs, target, args.steps) for depth in (3, 4)}
    gaps = {depth: gap_verdict(depth, runs) for depth, runs in results.items()}
    ancre = {depth: ancre_verdict(depth, runs) for depth, runs in results.items()}
    payload = {
        "machine": {**machine_info(), "cpu_count": os.cpu_count(), "numpy": np.__version__},
        "settings": settings(args.steps),
        "results": {f"K={k}": v for k, v in results.items()},
        "summary": {
            "exponential_gap_reproduced": {f"K={k}": g["reproduced"] for k, g in gaps.items()},
            "gap_details": {f"K={k}": g for k, g in gaps.items()},
            "ancre": {f"K={k}": a for k, a in ancre.items()},
            "verdict": summary_text(gaps, ancre),
        },
        "runtime_seconds": time.perf_counter() - start,
    }
    (args.out_dir / "ancre_case_study.json").write_text(json.dumps(payload, indent=1))
    plot(results, args.out_dir / "ancre_case_study.png")
    LOG.info("%s", payload["summary"]["verdict"])
    LOG.info("done in %.1fs -> %s", payload["runtime_seconds"], args.out_dir)


if __name__ == "__main__":
    main()
