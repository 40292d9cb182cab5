"""Replica bias: what a replica's narrowing does to its view of the architecture at the top rung.

    python -m benchmarks.trust.replica_bias build --corpus plays    # top rungs, seed 0 -> data/replica_bias_runs.csv
    python -m benchmarks.trust.replica_bias report                  # both corpora -> results/replica_bias.json

A search used to narrow each config at a fixed head count (the head size shrinking, no narrower than 8: the
*_keep_heads tables of `make fidelity`). Against the truth at T that top rung (T/10) missed by more than its seed
noise, in a pattern that lines up with the target's depth over width. Each `VARIANTS` entry trains the top rung of
every config of `benchmarks.trust.fidelity` again with another `Narrowing` (seed 0, the fidelity runs' recipe):

- a width floor at half the target's width, the head count kept;
- the same floor with heads of the target's size, fewer of them (attention scaled as at the target): what a search
  now does by default (`workers.ladder.narrowing`), so `make fidelity`'s replica tables hold it with both seeds.

A learning-rate sweep (`LR_SWEEP`: 1.5e-3, 3e-3, 6e-3 around the runs' 3e-3) trains the two matched-cost shapes
8x32 and 2x64 of every family at the top rung twice: as its replica, and at the target's own width for the same
compute. If the best rate moves by family, or differs between the two, the transfer rule is a source of bias.

`report` grades each view, the default narrowing's top rung beside them (`benchmarks.trust.architecture`): Kendall tau,
architecture tau, decision accuracy at matched cost, and the bias: the spread of each config's error (top rung
minus truth, after the error's own size trend) against what the rung's seed noise alone would give. The variant
is chosen on two corpora (highest mean architecture tau) and read on the third: leave one corpus out, the aspect
slope of a view graded on a choosing corpus fitted on neither it nor the held-out one.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.harness import append_runs, machine_info, pending, read_table, write_json
from benchmarks.trust import fidelity, fidelity_tables
from benchmarks.trust.architecture import (
    architecture_grade,
    aspect_slope,
    bias,
    corrected,
    lr_sweep,
    summary,
    truth_ceilings,
)
from benchmarks.trust.grading import Truth, graded_rows, losses_at
from nas.answer.extrapolate import RungPoint, seed_noise
from workers.ladder.narrowing import KEEP_HEADS, Narrowing

HERE = Path(__file__).resolve().parents[1]  # benchmarks/: its data/ and results/
RUNS_CSV = HERE / "data" / "replica_bias_runs.csv"
VARIANTS = {
    "floor d_T/2 keep heads": Narrowing(min_share=0.5, keep="heads"),
    "floor d_T/2 keep head size": Narrowing(min_share=0.5, keep="head_size"),
}
DEFAULT = "default: floor d_T/2 keep head size"
TARGET = (
    fidelity_tables.TRUTH_RATIO * fidelity_tables.LOWEST_RUNG * fidelity_tables.ETA ** (fidelity_tables.RUNGS - 1)
)  # the truth's T
COLUMNS = [*fidelity_tables.REPLICA_COLUMNS, "corpus", "variant", "n_heads"]


@dataclass(frozen=True)
class BiasJob:
    config: int
    arch: dict
    corpus: str
    variant: str
    seed: int = 0


def jobs(corpus: str, variants: list[str]) -> list[BiasJob]:
    return [
        BiasJob(i, arch, corpus, v) for v in variants for i, arch in enumerate(fidelity_tables.configs(False, corpus))
    ]


def run_job(job: BiasJob) -> list[dict]:
    """The top replica rung (REPLICA_TOP_SHARE x T) of one config under one narrowing, as a worker trains it."""
    import torch

    from search_spaces.residual_lm import ArchConfig
    from workers.data.corpus import load_corpus
    from workers.training.config import OptimConfig, RunConfig
    from workers.trial.contract import TrialRequest
    from workers.trial.replica import run_replica_trial

    torch.set_num_threads(1)
    cfg = ArchConfig(**job.arch)
    keep_head_size = VARIANTS[job.variant].keep == "head_size"
    measurement = fidelity_tables.replica_measurement(
        TARGET, [fidelity_tables.REPLICA_TOP_SHARE * TARGET], VARIANTS[job.variant]
    )
    run = RunConfig(**fidelity_tables.RUN)
    request = TrialRequest.of(cfg, measurement, optim=OptimConfig(lr=3e-3), run=run, seed=job.seed, width_probe=False)
    result = run_replica_trial(request, load_corpus(fidelity_tables.CORPORA[job.corpus].data()))
    base = fidelity_tables.job_fields(fidelity_tables.Job(job.config, job.arch, "replica", job.seed, TARGET), cfg, "")
    base |= {"status": str(result.status), "corpus": job.corpus, "variant": job.variant}
    rows = fidelity_tables.replica_rows(base, result.rungs)
    return [r | {"n_heads": r["replica_d_model"] // cfg.head_dim if keep_head_size else cfg.n_heads} for r in rows]


LR_SWEEP = (1.5e-3, 3e-3, 6e-3)
LR_SHAPES = ((8, 32), (2, 64))  # (n_layers, d_model), routed at neither: CONTRAST_SHAPES' first pair
LR_CSV = HERE / "data" / "replica_lr_runs.csv"
LR_COLUMNS = [*COLUMNS, "lr", "view"]
# How the top rung is trained in the sweep: the replica under the old narrowing (the head count kept, no narrower
# than 8), the target itself at its own width for the same compute, and the replica with heads of the target's
# size, no narrower than d_T / 2
LR_VIEWS = {
    "replica": KEEP_HEADS,
    "target width": Narrowing(min_share=1.0),
    "replica, head size kept": Narrowing(min_share=0.5, keep="head_size"),
}


@dataclass(frozen=True)
class LrJob:
    config: int
    arch: dict
    corpus: str
    lr: float
    view: str  # one of LR_VIEWS


def lr_jobs(corpus: str) -> list[LrJob]:
    chosen = [(i, a) for i, a in enumerate(fidelity_tables.configs(False, corpus))
              if (a["n_layers"], a["d_model"]) in LR_SHAPES and not a["mod_rate"]]  # fmt: skip
    return [LrJob(i, a, corpus, lr, v) for i, a in chosen for lr in LR_SWEEP for v in LR_VIEWS]


def run_lr_job(job: LrJob) -> list[dict]:
    """One config's top rung at one learning rate: its replica, or the target at T / 10."""
    import torch

    from search_spaces.residual_lm import ArchConfig
    from workers.data.corpus import load_corpus
    from workers.training.config import OptimConfig, RunConfig
    from workers.trial.contract import TrialRequest
    from workers.trial.replica import run_replica_trial

    torch.set_num_threads(1)
    cfg, top = ArchConfig(**job.arch), fidelity_tables.REPLICA_TOP_SHARE * TARGET
    narrowing = LR_VIEWS[job.view]
    plan = fidelity_tables.replica_measurement(TARGET, [top], narrowing)
    request = TrialRequest.of(cfg, plan, optim=OptimConfig(lr=job.lr), run=RunConfig(**fidelity_tables.RUN),
                              width_probe=False)  # fmt: skip
    result = run_replica_trial(request, load_corpus(fidelity_tables.CORPORA[job.corpus].data()))
    base = fidelity_tables.job_fields(
        fidelity_tables.Job(job.config, job.arch, "replica", 0, TARGET), cfg, str(result.status)
    )
    base |= {"corpus": job.corpus, "variant": DEFAULT, "lr": job.lr, "view": job.view}
    rows = fidelity_tables.replica_rows(base, result.rungs)
    kept = narrowing.keep == "head_size"
    return [r | {"n_heads": r["replica_d_model"] // cfg.head_dim if kept else cfg.n_heads} for r in rows]


def build(out: Path, todo: list[BiasJob], processes: int) -> None:
    rows = read_table(out) if out.exists() else []
    key = lambda j: (j.corpus, j.variant, j.config, j.seed)  # noqa: E731
    left = pending(todo, rows, key, lambda r: (r["corpus"], r["variant"], r["config"], r["seed"]))
    append_runs(out, left, run_job, columns=COLUMNS, processes=processes)


ANSWER = "answer as a search runs it (make fidelity, default layout and anchors)"
ASPECT = " + aspect correction fit on the other corpora"
KEEP_HEADS_VIEW = "floor 8 keep heads (the earlier default)"


def bias_report(bias_rows: Sequence[dict], lr_rows: Sequence[dict] = (), fidelity_json: Path | None = None) -> dict:
    """Each corpus: the default narrowing's top replica rung (seed 0, `benchmarks.trust.fidelity`'s replica table), the
    earlier default's (its *_keep_heads table), each variant's, and the search's answer (from `fidelity_json`),
    graded; each of them corrected by the slope of its error in ln(depth / width) fitted on the other corpora;
    the view chosen on two corpora read on the third (no choice sees the held-out corpus's truth, the slopes
    included); and the learning-rate sweep's best rate by family at both widths."""
    answers = json.loads(fidelity_json.read_text())["corpora"] if fidelity_json and fidelity_json.exists() else {}
    loaded: dict[str, Loaded] = {}
    for name, corpus in fidelity_tables.CORPORA.items():
        rows, replica = graded_rows(read_table(corpus.runs), read_table(corpus.replica_runs))
        if not rows:
            continue
        truth, archs = Truth.of(rows), fidelity_tables.architectures(rows, name)
        top = fidelity_tables.REPLICA_TOP_SHARE * truth.target
        views = {DEFAULT: losses_at(replica, top)}
        if corpus.keep_heads_runs is not None and corpus.keep_heads_runs.exists():
            views[KEEP_HEADS_VIEW] = losses_at(graded_rows(rows, read_table(corpus.keep_heads_runs))[1], top)
        for variant in VARIANTS:
            mine = [r for r in bias_rows if r["corpus"] == name and r["variant"] == variant]
            if {r["config"] for r in mine} >= set(truth.runs):
                views[variant] = losses_at(mine, top)
        if name in answers:
            answer = answers[name]["replica_ladder"]["layouts"][fidelity.DEFAULT_LAYOUT]["table_order"]["predicted"]
            views[ANSWER] = {int(c): v for c, v in answer.items()}
        noise = seed_noise([RungPoint(r["config"], "-", r["budget_flops"], r["val_loss"], r["seed"]) for r in replica
                            if r["budget_flops"] == top])  # fmt: skip
        loaded[name] = Loaded(truth, archs, views, noise)
    corpora: dict[str, dict] = {}
    for name, here in loaded.items():
        graded = {
            v: architecture_grade(p, here.truth, here.archs) | {"bias": bias(p, here.truth, here.archs, here.noise)}
            for v, p in here.views.items()
        }
        for v in here.views:
            if (fitted := _aspect_corrected(loaded, v, name, exclude=())) is not None:
                graded[v + ASPECT] = fitted
        corpora[name] = {"truth_ceilings": truth_ceilings(here.truth, here.archs), "views": graded}
    return {
        "corpora": corpora,
        "leave_one_corpus_out": _leave_one_out(loaded, corpora),
        "lr_sweep": lr_sweep(lr_rows),
    }


@dataclass(frozen=True)
class Loaded:
    truth: Truth
    archs: dict
    views: dict[str, dict[int, float]]
    noise: float | None


def _aspect_corrected(loaded: Mapping[str, Loaded], view: str, name: str, exclude: Sequence[str]) -> dict | None:
    """`view` on corpus `name` less the mean slope of its error in ln(depth / width) on the corpora other than `name`
    and `exclude` that have the view, graded; None when none has it."""
    sources = [o for o, c in loaded.items() if o != name and o not in exclude and view in c.views]
    if not sources or view not in loaded[name].views:
        return None
    here = loaded[name]
    slope = float(np.mean([aspect_slope(loaded[o].views[view], loaded[o].truth, loaded[o].archs) for o in sources]))
    graded = architecture_grade(corrected(here.views[view], here.archs, slope), here.truth, here.archs)
    return graded | {"slope_nats_per_ln_aspect": slope, "slope_fitted_on": sources}


def _leave_one_out(loaded: Mapping[str, Loaded], corpora: Mapping[str, dict]) -> dict:
    """For each corpus: the view chosen on the others (highest mean architecture tau there, an aspect-corrected
    view graded there with a slope fitted on neither it nor the held-out corpus), and its figures on the held-out
    corpus beside the default's."""
    out = {}
    for held in corpora:
        others = [c for c in corpora if c != held]
        common = set.intersection(*(set(loaded[c].views) for c in corpora)) - {ANSWER}
        score: dict[str, float] = {}
        for v in sorted(common):
            score[v] = float(np.mean([corpora[o]["views"][v]["architecture_tau"] or -1.0 for o in others]))
            fitted = [_aspect_corrected(loaded, v, o, exclude=(held,)) for o in others]
            if all(f is not None for f in fitted):
                score[v + ASPECT] = float(np.mean([f["architecture_tau"] or -1.0 for f in fitted if f is not None]))
        chosen = max(sorted(score), key=score.get)
        views = corpora[held]["views"]
        out[held] = {
            "chosen_on_the_others": chosen,
            "score_on_the_others": score,
            "chosen": summary(views[chosen]) if chosen in views else None,
            "default": summary(views[DEFAULT]),
        }
    return out


def _widths(rows: Sequence[dict], top: float) -> dict:
    chosen = [r for r in rows if r["budget_flops"] == top and r["seed"] == 0]
    share = [r["replica_d_model"] / r["d_model"] for r in chosen]
    return {"replica_width_share": {"min": float(min(share)), "median": float(np.median(share))}} if share else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("build", "build-lr", "report"))
    parser.add_argument("--corpus", choices=sorted(fidelity_tables.CORPORA), default="plays")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="build: comma-separated VARIANTS names")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "replica_bias.json")
    args = parser.parse_args()
    if args.command == "build":
        variants = args.variants.split(",")
        if unknown := [v for v in variants if v not in VARIANTS]:
            parser.error(f"--variants: {unknown} are not among {list(VARIANTS)}")
        build(RUNS_CSV, jobs(args.corpus, variants), args.processes)
    elif args.command == "build-lr":
        rows = read_table(LR_CSV) if LR_CSV.exists() else []
        key = lambda j: (j.corpus, j.config, j.lr, j.view)  # noqa: E731
        left = pending(lr_jobs(args.corpus), rows, key, lambda r: (r["corpus"], r["config"], r["lr"], r["view"]))
        append_runs(LR_CSV, left, run_lr_job, columns=LR_COLUMNS, processes=args.processes)
    else:
        lr_rows = read_table(LR_CSV) if LR_CSV.exists() else []
        result = bias_report(read_table(RUNS_CSV), lr_rows, HERE / "results" / "fidelity.json")
        write_json(args.out, result | {"machine": machine_info()})


if __name__ == "__main__":
    main()
