"""The default proxy trial: wall time, share of it outside training steps, peak memory.

Default proxy = the `bench` flavour (d 128, 4 layers, seq 128, batch 16) at 2e12 training FLOPs,
MoD 0.25, on the shipped corpus: one `run_trial` per residual family, each in a fresh process so
that peak RSS (`ru_maxrss`) is the trial's own. "Outside" = wall time of `run_trial` (model build,
evaluations, diagnostics, width probe, reporting) minus the time inside the training steps
(schedule, forward, backward, clipping, AdamW), measured with perf_counter around each step.

    python -m benchmarks.speed.proxy_trial --out benchmarks/results/proxy_trial.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from benchmarks.harness import FAMILIES, PROXY_BUDGET, machine_info, write_json

TARGETS = {"outside_steps_share_max": 0.10, "peak_memory_mb_max": 1536}

ONE_TRIAL = """
import json, sys
from search_spaces.residual_lm import flavour
from workers import load_corpus, DataConfig, run_trial
corpus = load_corpus(DataConfig())
r = run_trial(flavour("bench", residual=sys.argv[1], mod_rate=0.25), float(sys.argv[2]), corpus)
print(json.dumps({k: getattr(r, k) for k in ("status", "failure_reason", "val_loss", "tokens_seen", "steps",
                  "wall_time_s", "tokens_per_s", "step_time_share", "peak_memory_mb", "executed_flops_per_token")}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/proxy_trial.json"))
    parser.add_argument("--budget", type=float, default=PROXY_BUDGET)
    args = parser.parse_args()
    trials = {}
    for family in FAMILIES:
        done = subprocess.run(
            [sys.executable, "-c", ONE_TRIAL, family, str(args.budget)], check=True, capture_output=True, text=True
        )
        trial = json.loads(done.stdout.strip().splitlines()[-1])
        reason = trial.pop("failure_reason")
        if trial["step_time_share"] is None:  # an infeasible or crashed trial has no timing to report
            sys.exit(f"proxy_trial: the {family} trial has no timing ({trial['status']}): {reason}")
        trials[family] = {**trial, "outside_steps_share": 1 - trial["step_time_share"]}
    met = {
        f: {
            "outside_steps": t["outside_steps_share"] < TARGETS["outside_steps_share_max"],
            "peak_memory": t["peak_memory_mb"] < TARGETS["peak_memory_mb_max"],
            "wall_10_to_30_s": 10 <= t["wall_time_s"] <= 30,
        }
        for f, t in trials.items()
    }
    out = {
        "machine": machine_info(),
        "budget_flops": args.budget,
        "flavour": "bench",
        "mod_rate": 0.25,
        "targets": TARGETS,
        "trials": trials,
        "targets_met": met,
    }
    write_json(args.out, out)
    print(json.dumps(met))


if __name__ == "__main__":
    main()
