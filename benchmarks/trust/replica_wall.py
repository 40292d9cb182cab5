"""Wall time of a replica-ladder trial against a budget-ladder trial at the same rung budgets.

    python -m benchmarks.trust.replica_wall --out benchmarks/results/replica_wall.json   # about 10 minutes here

Both ladders give a trial the rungs C, eta C, eta^2 C (the search's defaults: 3 rungs, eta 3) and the
target T = 10 x the top rung (the search's default). The budget ladder trains the config itself once,
to the top rung, with a cooldown branch at each rung below (`workers.ladder.plans`); the replica ladder
trains one replica per rung (`workers.trial.replica`), each its own run, with `min_width` the narrowest width
it may use (the default `DEFAULT_MIN_WIDTH`, and wider floors: a rung whose on-path width is below the
floor trains the floor width for fewer tokens, off the path). Every trial runs in this process on one
thread, as a search's worker runs it, with the search's RunConfig and the width probe on; the trials of
one config run back to back, in rotating order, so the machine's drift hits every variant alike.

Where the time goes is read from the runs themselves: optimizer steps and their mean time, and the share
of wall time inside steps. The JSON also times one training step of a small model at each width (the
per-step cost floor of this machine): below some width a step costs about the same whatever the width,
so a replica's wall time follows its step count, and its step count is the tokens that its budget buys
at its FLOPs per token.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks.harness import machine_info, make_step, time_interleaved, write_json

HERE = Path(__file__).resolve().parents[1]  # benchmarks/: its data/ and results/
CONFIGS = [  # from make fidelity's grid: the narrowest, a middle and the widest width
    dict(residual="cascaded", d_model=32, n_layers=2, mod_rate=0.0),
    dict(residual="nag", d_model=64, n_layers=4, mod_rate=0.25),
    dict(residual="ancre", d_model=96, n_layers=4, mod_rate=0.5),
]
FIXED = dict(vocab_size=256, seq_len=64, n_heads=2, mod_every=2)
TRIAL_FLOPS, RUNGS, ETA, TARGET_RATIO = 5e10, 3, 3.0, 10.0
STEP_WIDTHS = (8, 16, 32, 64, 96)
RUNG_FIELDS = ("rung", "budget_flops", "d_model", "steps", "train_seconds", "on_path", "val_loss")


def run_variants(arch: dict, trial_flops: float, min_widths: list[int], rotation: int) -> dict:
    """One budget-ladder trial and one replica trial per floor in `min_widths`, in rotated order."""
    from search_spaces.residual_lm import ArchConfig
    from workers.data.config import DataConfig
    from workers.data.corpus import load_corpus
    from workers.ladder.narrowing import KEEP_HEADS
    from workers.ladder.plans import RungSpacing
    from workers.ladder.trial_plan import LadderPlan
    from workers.trial.contract import TrialRequest
    from workers.trial.replica import run_replica_trial, rung_budgets
    from workers.trial.run import run_trial

    cfg, corpus = ArchConfig(**arch, **FIXED), load_corpus(DataConfig())
    ladder = RungSpacing(rungs=RUNGS, eta=ETA)
    budgets = rung_budgets(trial_flops, ladder)
    target = TARGET_RATIO * budgets[-1]
    variants = ["budget", *(f"replica_min_width_{w}" for w in min_widths)]
    variants = variants[rotation % len(variants) :] + variants[: rotation % len(variants)]
    out = {}
    for name in variants:
        start = time.perf_counter()
        if name == "budget":
            result = run_trial(cfg, budgets[-1], corpus, spacing=ladder)
        else:
            floor = int(name.rsplit("_", 1)[1])
            narrowing = KEEP_HEADS.model_copy(update={"min_width": floor})  # the floors this benchmark measured
            measurement = LadderPlan(budgets[-1], None, tuple(budgets), target, narrowing)
            result = run_replica_trial(TrialRequest.of(cfg, measurement), corpus)
        wall = time.perf_counter() - start
        out[name] = {
            "status": str(result.status),
            "wall_s": wall,
            "steps": result.steps,
            "tokens": result.tokens_seen,
            "training_flops": result.training_flops + result.branch_flops,
            "step_time_share": result.step_time_share,
            "mean_step_ms": 1e3 * wall * (result.step_time_share or 0.0) / max(result.steps, 1),
            "rungs": [{k: getattr(r, k) for k in RUNG_FIELDS} for r in result.rungs],
        }
    return out


def step_floor(widths: tuple[int, ...], batch: int, repeats: int = 20) -> dict[int, float]:
    """Median ms of one training step (forward, backward, clip, AdamW) of a 4-layer cascaded model per width."""
    from search_spaces.residual_lm import ArchConfig, build_model
    from workers.training.config import OptimConfig
    from workers.training.train import build_optimizer

    out = {}
    for width in widths:
        model = build_model(ArchConfig(residual="cascaded", d_model=width, n_layers=4, **FIXED))
        step = make_step(
            model,
            batch=batch,
            seq_len=FIXED["seq_len"],
            vocab_size=FIXED["vocab_size"],
            optimizer=build_optimizer(model, OptimConfig()),
            clip_norm=1.0,
        )
        times = time_interleaved({"step": step}, rounds=repeats, warmup=3)["step"]
        out[width] = 1e3 * statistics.median(times)
    return out


def summarise(per_config: list[dict]) -> dict:
    names = list(per_config[0]["variants"])
    total = {n: sum(c["variants"][n]["wall_s"] for c in per_config) for n in names}
    steps = {n: sum(c["variants"][n]["steps"] for c in per_config) for n in names}
    flops = {n: sum(c["variants"][n]["training_flops"] for c in per_config) for n in names}
    return {
        "wall_over_budget_ladder": {n: total[n] / total["budget"] for n in names if n != "budget"},
        "wall_over_budget_ladder_per_config": {
            n: [c["variants"][n]["wall_s"] / c["variants"]["budget"]["wall_s"] for c in per_config]
            for n in names
            if n != "budget"
        },
        "steps_over_budget_ladder": {n: steps[n] / steps["budget"] for n in names if n != "budget"},
        "flops_over_budget_ladder": {n: flops[n] / flops["budget"] for n in names if n != "budget"},
        "goal_wall_over_budget_ladder": 1.5,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "replica_wall.json")
    parser.add_argument("--min-widths", default="8,32", help="replica width floors to time, comma-separated")
    parser.add_argument("--smoke", action="store_true", help="one small config at a tiny budget (tests)")
    args = parser.parse_args(argv)
    import torch

    from workers.training.config import RunConfig

    torch.set_num_threads(1)
    configs, trial_flops = (CONFIGS[:1], 3e9) if args.smoke else (CONFIGS, TRIAL_FLOPS)
    floors = [int(w) for w in args.min_widths.split(",")]
    start = time.perf_counter()
    per_config = []
    for i, arch in enumerate(configs):
        per_config.append({"arch": arch, "variants": run_variants(arch, trial_flops, floors, i)})
        print(json.dumps({arch["residual"]: {k: round(v["wall_s"], 1) for k, v in per_config[-1]["variants"].items()}}))
    result = {
        "summary": summarise(per_config),
        "step_ms_by_width": step_floor(STEP_WIDTHS[:2] if args.smoke else STEP_WIDTHS, RunConfig().batch_size),
        "trial_flops": trial_flops,
        "rungs": RUNGS,
        "eta": ETA,
        "target_ratio": TARGET_RATIO,
        "batch_size": RunConfig().batch_size,
        "per_config": per_config,
        "machine": machine_info(),
        "wall_s": time.perf_counter() - start,
    }
    write_json(args.out, result)
    print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
