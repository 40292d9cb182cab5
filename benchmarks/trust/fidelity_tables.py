"""The fidelity benchmark's tables: its corpora, their configs, and the runs that fill each table.

Three corpora (`CORPORA`: the shipped plays, Python source from `benchmarks.corpora.code_corpus`, and the
held-out handbook from `benchmarks.corpora.handbook_corpus`), each with its `configs`, every run as a search's
worker runs it (lr 3e-3, the default schedule): the truth (each config at T, two seeds), the top replica rung
(T/10, narrowed as a search narrows by default, two seeds), on the first two the budget ladder (4 rungs, T/80 ..
T/10, eta 2) and every config's anchor run at T/3, and the replica rungs at every share of KEEP_HEADS_SHARES with
the head count kept and no floor but width 8 (*_keep_heads tables: the path the level rungs of a search take, and
every layout of a ladder). A build (`python -m benchmarks.trust.fidelity build ...`) runs 2 processes of 1 torch
thread and resumes with the jobs its table lacks; `--space FILE` trains under that space's horizon rule.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.harness import FAMILIES, append_runs, pending, read_table
from benchmarks.trust.grading import graded_rows
from nas.answer.decisions import Architecture

HERE = Path(__file__).resolve().parents[1]  # benchmarks/: its data/ and results/
ROOT = HERE.parent
RUNS_CSV = HERE / "data" / "fidelity_runs.csv"
WIDTHS, DEPTHS, MOD_RATES = (32, 64, 96), (2, 4, 6), (0.0, 0.25, 0.5)
FIXED = dict(vocab_size=256, seq_len=64, n_heads=2, mod_every=2)
# 4 rungs at ratio 2 (C0 .. 8 C0, the span of 3 rungs at ratio 3): the held-out check (fit the lower rungs,
# predict the top one) then sees 3 points per config, enough to test a per-config exponent
LOWEST_RUNG, RUNGS, ETA, TRUTH_RATIO = 2.25e10, 4, 2.0, 10.0
# 256 held-out sequences (16k tokens spread over the held-out text; a search's default is 64): the
# evaluation's sampling noise on a gap between two runs falls to 0.004 nats (0.008 at 64 sequences)
RUN = dict(batch_size=8, eval_sequences=256, evals=1, report_every=1000)
COLUMNS = ["config", "residual", "n_layers", "d_model", "mod_rate", "params", "executed_flops_per_token", "kind",
           "seed", "rung", "budget_flops", "tokens", "val_loss", "compute_flops", "wall_time_s", "status"]  # fmt: skip
# Replica rungs (`workers.trial.replica`), narrowed as a search narrows by default, are built at T/10: the layout a
# search chooses by default trains every config there once (`workers.ladder.layout`). The tables that narrowed at a
# fixed head count (*_keep_heads) hold every share of KEEP_HEADS_SHARES, each its own run, so that the report can
# replay there any ladder whose rungs are among them: 3 rungs at eta 3 (T/90, T/30, T/10), 2 at eta 2 or 3.
REPLICA_TOP_SHARE = 0.1
REPLICA_SHARES = (REPLICA_TOP_SHARE,)
KEEP_HEADS_SHARES = (1 / 90, 1 / 40, 1 / 30, 1 / 20, 1 / 10)
# Anchors (`nas.answer.discrepancy`): every config also trained once (seed 0) as the replica a search trains at
# ANCHOR_SHARE x T, wider and nearer the target's shape than the top rung, so that a replay can pick any of them
ANCHOR_SHARE = 1 / 3
REPLICA_COLUMNS = [*COLUMNS, "replica_d_model", "replica_params", "tokens_per_param", "target_tokens_per_param",
                   "on_path"]  # fmt: skip
REPLICA_CSV = HERE / "data" / "fidelity_replica_runs.csv"


@dataclass(frozen=True)
class Corpus:
    """One corpus of the benchmark: where its text is, and its two tables."""

    name: str
    source: str  # DataConfig.source: "shipped", or a file of this repository
    runs: Path  # budget ladder and truth rows
    replica_runs: Path  # replica rungs, narrowed as a search does by default
    anchor_runs: Path  # the replica at ANCHOR_SHARE x T of every config
    keep_heads_runs: Path | None = None  # replica rungs narrowed at a fixed head count (the earlier default)

    def data(self):
        from workers.data.config import DataConfig

        return DataConfig(source=self.source if self.source == "shipped" else str(ROOT / self.source))


CORPORA = {
    "plays": Corpus(
        "plays",
        "shipped",
        RUNS_CSV,
        REPLICA_CSV,
        HERE / "data" / "fidelity_anchor_runs.csv",
        HERE / "data" / "fidelity_replica_runs_keep_heads.csv",
    ),
    "code": Corpus(
        "code",
        "benchmarks/data/python_stdlib.jsonl.gz",  # benchmarks/corpora/code_corpus.py
        HERE / "data" / "fidelity_code_runs.csv",
        HERE / "data" / "fidelity_code_replica_runs.csv",
        HERE / "data" / "fidelity_code_anchor_runs.csv",
        HERE / "data" / "fidelity_code_replica_runs_keep_heads.csv",
    ),
    "handbook": Corpus(  # held out: chosen after every method and constant (benchmarks/corpora/handbook_corpus.py)
        "handbook",
        "benchmarks/data/debian_handbook.jsonl.gz",
        HERE / "data" / "fidelity_handbook_runs.csv",
        HERE / "data" / "fidelity_handbook_replica_runs.csv",
        HERE / "data" / "fidelity_handbook_anchor_runs.csv",
        HERE / "data" / "fidelity_handbook_replica_runs_keep_heads.csv",
    ),
}


@dataclass(frozen=True)
class Job:
    config: int
    arch: dict
    kind: str  # "ladder", "truth", "replica" or "anchor"
    seed: int
    budget: float  # the top rung's, or the truth's (a replica job's target)
    rule: dict = field(default_factory=dict)  # OptimConfig's horizon-rule fields (`horizon_rule`)
    corpus: str = "plays"
    keep_heads: bool = False  # a replica job of the *_keep_heads tables: every share of KEEP_HEADS_SHARES

    @property
    def cost(self) -> float:
        replica = sum(REPLICA_SHARES) * 1.75
        share = {"ladder": 1.1, "truth": 1.0, "replica": replica, "anchor": ANCHOR_SHARE}[self.kind]
        return self.budget * share


# Matched-cost contrasts, appended to every corpus's grid: each shape in every family (family at equal shape), and
# shapes paired at near-equal parameters or executed FLOPs per token (within 15%): 8x32 / 2x64 / 4x48 and 4x64 with
# blocks routed at 0.875 on every other block (238k-271k FLOPs per token; 8x32 and 2x64 at 123k / 127k parameters);
# 12x32 / 3x64 / 8x48 with blocks routed at 0.5 (340k-388k; 12x32 and 3x64 at 177k / 175k parameters). At T they
# see 6-20 tokens per parameter. (n_layers, d_model, mod_rate, mod_granularity)
CONTRAST_SHAPES = (
    (8, 32, 0.0, "sublayer"),
    (2, 64, 0.0, "sublayer"),
    (4, 48, 0.0, "sublayer"),
    (4, 64, 0.875, "block"),
    (12, 32, 0.0, "sublayer"),
    (3, 64, 0.0, "sublayer"),
    (8, 48, 0.5, "block"),
)


def configs(smoke: bool, corpus: str = "plays") -> list[dict]:
    """The configs of a corpus. Plays: every family x width x depth but the largest (96 x 6), the MoD rate in a
    Latin square over width and depth, so it is confounded with neither (24 configs). Code: every family at
    five (width, depth, MoD rate) points that cover the same grid (15 configs). Both then add every family at each
    of `CONTRAST_SHAPES` (21 configs). Smoke: 3 tiny ones."""
    if corpus in ("code", "handbook"):
        shapes = [(32, 2, 0.25), (32, 6, 0.0), (64, 4, 0.5), (64, 6, 0.25), (96, 2, 0.0)]
        grid = [(f, w, d, m) for f in FAMILIES for w, d, m in shapes]
    else:
        grid = [
            (f, w, d, MOD_RATES[(WIDTHS.index(w) + DEPTHS.index(d)) % 3])
            for f, w, d in itertools.product(FAMILIES, WIDTHS, DEPTHS)
            if (w, d) != (96, 6)
        ]
    chosen = [dict(residual=f, d_model=w, n_layers=d, mod_rate=m, **FIXED) for f, w, d, m in grid]
    chosen += [
        dict(residual=f, d_model=w, n_layers=d, mod_rate=m, **FIXED, mod_granularity=g)
        for d, w, m, g in CONTRAST_SHAPES
        for f in FAMILIES
    ]
    if smoke:
        return [dict(c, d_model=32, n_layers=2) for c in chosen[:3]]
    return chosen


def jobs(
    smoke: bool,
    rule: dict | None = None,
    kinds: tuple[str, ...] = ("ladder", "truth"),
    seeds: tuple[int, ...] = (0, 1),
    corpus: str = "plays",
    keep_heads: bool = False,
) -> list[Job]:
    low = 2e8 if smoke else LOWEST_RUNG
    top = low * ETA ** (RUNGS - 1)
    rule = rule or {}
    out = []
    for i, arch in enumerate(configs(smoke, corpus)):
        if "ladder" in kinds:
            out += [Job(i, arch, "ladder", seed, top, rule, corpus=corpus) for seed in seeds]
        if "truth" in kinds:
            out += [Job(i, arch, "truth", seed, TRUTH_RATIO * top, rule, corpus=corpus) for seed in seeds]
        for kind in {"replica", "anchor"} & set(kinds):
            out += [Job(i, arch, kind, seed, TRUTH_RATIO * top, rule, corpus, keep_heads) for seed in seeds]
    return sorted(out, key=lambda j: -j.cost)  # longest first: the two processes finish together


def replica_rung_flops(target: float, shares: Sequence[float] = REPLICA_SHARES) -> list[float]:
    """The replica rungs' budgets for target T: T x each share, lowest first."""
    return [target * share for share in sorted(shares)]


def run_job(job: Job) -> list[dict]:
    """One ladder or truth run in this process; its rows for the CSV."""
    import torch

    from search_spaces.residual_lm import ArchConfig
    from workers.data.corpus import load_corpus
    from workers.ladder.plans import RungSpacing
    from workers.training.config import OptimConfig, RunConfig
    from workers.trial.run import run_trial

    torch.set_num_threads(1)
    cfg = ArchConfig(**job.arch)
    if job.kind in ("replica", "anchor"):
        return run_replica_job(job, cfg)
    ladder = RungSpacing(rungs=RUNGS if job.kind == "ladder" else 1, eta=ETA)
    result = run_trial(
        cfg,
        job.budget,
        load_corpus(CORPORA[job.corpus].data()),
        seed=job.seed,
        optim=OptimConfig(lr=3e-3, **job.rule),
        run=RunConfig(**RUN),
        width_probe=False,
        spacing=ladder,
    )
    base = job_fields(job, cfg, str(result.status)) | dict(
        wall_time_s=result.wall_time_s, compute_flops=result.training_flops + result.branch_flops
    )
    rungs = [asdict(r) for r in result.rungs] or [
        dict(rung=0, budget_flops=job.budget, tokens=result.tokens_seen, val_loss=result.val_loss)
    ]
    return [{**base, **{k: r[k] for k in ("rung", "budget_flops", "tokens", "val_loss")}} for r in rungs]


def job_fields(job: Job, cfg, status: str) -> dict:
    """The columns every row of a job shares: the config, its size and cost, the job's kind and seed."""
    from search_spaces.residual_lm import flops_per_token, parameter_count

    return dict(
        config=job.config,
        residual=cfg.residual,
        n_layers=cfg.n_layers,
        d_model=cfg.d_model,
        mod_rate=cfg.mod_rate,
        params=parameter_count(cfg),
        executed_flops_per_token=flops_per_token(cfg).executed,
        kind=job.kind,
        seed=job.seed,
        status=status,
    )


def run_replica_job(job: Job, cfg) -> list[dict]:
    """Every replica rung of one config and seed, as a search's worker trains them (`run_replica_trial`), narrowed
    as a search does by default; an anchor job: the one replica at ANCHOR_SHARE x T."""
    from workers.data.corpus import load_corpus
    from workers.ladder.narrowing import KEEP_HEADS, Narrowing
    from workers.training.config import OptimConfig, RunConfig
    from workers.trial.contract import TrialRequest
    from workers.trial.replica import run_replica_trial

    shares = KEEP_HEADS_SHARES if job.keep_heads else REPLICA_SHARES
    flops = replica_rung_flops(job.budget, shares) if job.kind == "replica" else [ANCHOR_SHARE * job.budget]
    narrowing = KEEP_HEADS if job.keep_heads else Narrowing()  # else as a search narrows by default
    measurement = replica_measurement(job.budget, flops, narrowing)
    optim, run = OptimConfig(lr=3e-3, **job.rule), RunConfig(**RUN)
    request = TrialRequest.of(cfg, measurement, optim=optim, run=run, seed=job.seed, width_probe=False)
    result = run_replica_trial(request, load_corpus(CORPORA[job.corpus].data()))
    return replica_rows(job_fields(job, cfg, str(result.status)), result.rungs)


def replica_measurement(target: float, rung_flops, narrowing):
    """Replica rungs of `rung_flops` (lowest first) on the path to `target`, narrowed as `narrowing` says."""
    from workers.ladder.trial_plan import LadderPlan

    return LadderPlan(rung_flops[-1], None, tuple(rung_flops), target, narrowing)


def replica_rows(base: dict, records: Sequence) -> list[dict]:
    """A replica trial's rung records (`RungRecord`) as table rows, each with the job's shared columns `base`."""
    rungs = [asdict(r) for r in records]
    return [
        {
            **base,
            **{k: r[k] for k in ("rung", "budget_flops", "tokens", "val_loss", "tokens_per_param", "on_path")},
            "compute_flops": r["training_flops"],
            "wall_time_s": r["train_seconds"],
            "replica_d_model": r["d_model"],
            "replica_params": r["params"],
            "target_tokens_per_param": r["target_tokens_per_param"],
        }
        for r in rungs
    ]


def horizon_rule(space: Path | None) -> dict:
    """The horizon rule (`OptimConfig.horizon_tokens`, `horizon_exponents`, `horizon_span`) of a space file
    (`--space`), as that space's trials run; none for the default space. 3e-3 is NAG's best rate at the
    completep space's 752,640 tokens (`make transfer`)."""
    if space is None:
        return {}
    from nas.space.loading import load_space

    fixed = load_space(space).fixed
    return {k: fixed[k] for k in ("horizon_tokens", "horizon_exponents", "horizon_span") if k in fixed}


def pending_jobs(out: Path, todo: list[Job]) -> list[Job]:
    """The jobs of `todo` whose rows the table at `out` does not hold yet (all of them without a table)."""
    rows = read_table(out) if out.exists() else []
    return pending(todo, rows, lambda j: (j.config, j.kind, j.seed), lambda r: (r["config"], r["kind"], r["seed"]))


def build(out: Path, all_jobs: list[Job], processes: int = 2) -> None:
    """Run the jobs `out` lacks, appending their rows (a killed build resumes where it stopped)."""
    columns = REPLICA_COLUMNS if any(j.kind in ("replica", "anchor") for j in all_jobs) else COLUMNS
    append_runs(out, pending_jobs(out, all_jobs), run_job, columns=columns, processes=processes)


def architectures(rows: Sequence[dict], corpus: str) -> dict[int, Architecture]:
    """Each config's architecture: its entry in `configs` where the row is that config (MoD's routing with it),
    else the row's own fields (a smoke table's configs)."""
    known, keys = configs(False, corpus), ("residual", "n_layers", "d_model", "mod_rate")
    return {
        r["config"]: Architecture.of(
            known[r["config"]] if r["config"] < len(known) and all(known[r["config"]][k] == r[k] for k in keys) else r
        )  # fmt: skip
        for r in rows
    }


def ready(corpus: Corpus) -> bool:
    """Whether a corpus's truth and replica tables hold at least one config in full (a table being built may not)."""
    if not (corpus.runs.exists() and corpus.replica_runs.exists()):
        return False
    rows, _ = graded_rows(read_table(corpus.runs), read_table(corpus.replica_runs))
    return any(r["kind"] == "truth" for r in rows)
