"""The plan of a search before it runs (`nas search --dry-run`): what it would train and about how long it would
take on this machine, with nothing trained and nothing stored.

- **The layout**: the ladder (replica or budget), the rungs the search lays out (`Budget.ladder`: C_r =
  C eta^r, or a replica ladder's top rung alone where promotion would save nothing), the target T, and on a replica
  ladder the
  narrowest and widest replica each rung trains (`workers.trial.replica.plan_replica`), over the configs a search
  of the space may train: a sample of `SAMPLED_CONFIGS` of its proposals that are feasible, or each candidate.
- **The runs**: n trials at rung 0; of the n_r reaching rung r, the k-th to report climbs if it is among the best
  ceil(k / eta) of the k so far (asynchronous successive halving), so sum_k ceil(k / eta) / k of them are expected
  to climb (`climbing`: 7 of 12 at eta 2, more than n / eta); on a replica ladder each rung is a run, and the
  first `NOISE_REPEATS` stops
  measure their rung again; on a budget ladder a trial is one run (its cooldown branches, a `cooldown` share of
  each lower rung's budget, are not counted). The front's repeats add `repeat_seeds` runs of each of its members at
  the top rung, for the front's expected size among the trials there (`expected_front_size`); the anchors
  (`Budget.anchor_plan`) add their runs, each a replica at the anchor budget. A candidates search lists each
  candidate, as if it climbed every rung.
- **The compute**: each run's training FLOPs summed, and as a multiple of T.
- **The wall time**: each run's steps times the seconds of a training step measured here on the narrowest and the
  widest config at one thread (a trial's share: one CPU each, `nas.search.ray_env`), interpolated in log FLOPs per
  token between them; plus its evaluations and width certificate, about a forward pass (and a backward pass for
  the certificate) over the held-out sequences; divided among the workers, plus Ray's start-up. The start-up and
  per-trial overhead are `RAY_START_S` and `TRIAL_START_S`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import optuna
import torch

from search_spaces.residual_lm import ArchConfig, flops_per_token
from workers.ladder.layout import Layout
from workers.ladder.plans import InfeasibleBudget, plan_budget
from workers.ladder.replica import plan_replica
from workers.training.config import OptimConfig, RunConfig
from workers.training.train import measured_step_seconds

from ..answer.decisions import Architecture
from ..answer.rung_decision import NOISE_REPEATS
from ..space import CANDIDATE, SearchSpace, suggest, to_configs
from ..space.budget import Budget, trial_is_feasible
from .settings import SearchSettings

__all__ = [
    "RAY_START_S",
    "SAMPLED_CONFIGS",
    "TRIAL_START_S",
    "CandidatePlan",
    "RungPlan",
    "SearchPlan",
    "climbing",
    "expected_front_size",
    "plan_search",
]

SAMPLED_CONFIGS = 12  # proposals of a sampled space the plan averages over (each a few shape-only model builds)
# What a search spends outside its trials' steps, measured on `make demo` (the plan's estimate against the real
# search's wall time): Ray's start, the corpus and the answer once per search; Tune's start of each trial before its
# first step.
RAY_START_S = 25.0
TRIAL_START_S = 1.0


@dataclass(frozen=True)
class Run:
    """One training run of a trial: its rung, training FLOPs, the config it trains and that config's steps."""

    rung: int
    flops: float
    arch: ArchConfig
    steps: int


@dataclass(frozen=True)
class RungPlan:
    """Rung `rung`: its budget, the runs expected there, the narrowest and widest width trained (None: the configs'
    own, on a budget ladder)."""

    rung: int
    budget_flops: float
    runs: float
    widths: tuple[int, int] | None


@dataclass(frozen=True)
class CandidatePlan:
    """One candidate of a candidates search: its index and architecture, why it would not be trained (None: it
    would be), and climbing every rung: its replica widths, runs, training FLOPs and seconds."""

    index: int
    arch: str
    executed_flops_per_token: float
    infeasible_reason: str | None
    widths: tuple[int, ...]
    runs: int
    training_flops: float
    seconds: float


@dataclass(frozen=True)
class SearchPlan:
    """What a search would run (module docstring)."""

    ladder: str
    target: float
    trials: int
    trained: int  # those that would train (a candidate may be infeasible; a sampled search proposes again)
    workers: int
    rungs: tuple[RungPlan, ...]
    runs: float
    training_flops: float
    seconds: float
    timed: tuple[tuple[str, float, float], ...]  # (config, FLOPs per token, seconds per step) as measured here
    candidates: tuple[CandidatePlan, ...] = ()
    layout: str = ""  # the chosen layout and why
    anchors: int = 0  # the anchors' runs, among `runs`
    level: int = 0  # the level configs, their runs among `runs` (`level_budgets` each)
    level_budgets: tuple[float, ...] = ()

    @property
    def of_target(self) -> float:
        """The training FLOPs in all as a multiple of T."""
        return self.training_flops / self.target


def plan_search(space: SearchSpace, budget: Budget, settings: SearchSettings) -> SearchPlan:
    """The plan of a search of `space` under `budget` and `settings` (module docstring)."""
    if space.candidates:
        configs = [to_configs(space, {CANDIDATE: i}) for i in range(len(space.candidates))]
    else:
        configs = [to_configs(space, p) for p in _proposals(space, budget, SAMPLED_CONFIGS)]
    run = configs[0][2]  # the run settings every trial shares
    reasons = [trial_is_feasible(arch, budget, run.batch_size) for arch, _, _ in configs]
    ladders = [
        _runs(arch, budget, run) if reason is None else []
        for (arch, _, _), reason in zip(configs, reasons, strict=True)
    ]
    timing = _timing([r.arch for runs in ladders for r in runs], run.batch_size)
    trials = len(space.candidates) if space.candidates else budget.n_trials
    trained = sum(1 for runs in ladders if runs) if space.candidates else trials
    ladder = budget.ladder
    layout = ladder.layout
    reaching = [float(trained)]  # the trials expected at each rung
    for _ in range(1, layout.rungs):
        reaching.append(climbing(reaching[-1], layout.eta))
    runs, flops, seconds = _totals(ladders, budget, settings, reaching, lambda r: timing.seconds(r, run))
    anchors = budget.anchor_plan(trained)
    if anchors.count:
        anchor_runs = [_anchor_run(arch, budget, anchors.flops, run) for (arch, _, _), r in zip(configs, reasons,
                       strict=True) if r is None]  # fmt: skip
        anchor_runs = [a for a in anchor_runs if a is not None]
        if anchor_runs:
            each = sum(timing.seconds(a, run) for a in anchor_runs) / len(anchor_runs)
            runs, flops = runs + anchors.count, flops + anchors.cost
            seconds += anchors.count * each / settings.workers
    level = budget.level_plan(trained)
    if level.count:
        level_runs = [_level_runs(arch, budget, level.budgets, run) for (arch, _, _), r in zip(configs, reasons,
                      strict=True) if r is None]  # fmt: skip
        each = [sum(timing.seconds(x, run) for x in runs_) for runs_ in level_runs if runs_]
        runs, flops = runs + level.count * len(level.budgets), flops + level.cost
        seconds += level.count * (sum(each) / len(each) if each else 0.0) / settings.workers
    rungs = tuple(
        RungPlan(r, c, reaching[r], _widths(ladders, r) if budget.ladder_kind == "replica" else None)
        for r, c in enumerate(_budgets(layout))
    )
    candidates = tuple(
        CandidatePlan(
            i,
            Architecture.of(arch).describe(),
            flops_per_token(arch).executed,
            reasons[i],
            tuple(r.arch.d_model for r in ladders[i]),
            len(ladders[i]),
            sum(r.flops for r in ladders[i]),
            sum(timing.seconds(r, run) for r in ladders[i]),
        )
        for i, (arch, _, _) in enumerate(configs)
        if space.candidates
    )
    return SearchPlan(budget.ladder_kind, ladder.target_flops, trials, trained, settings.workers, rungs, runs, flops,
                      seconds, timing.timed, candidates, layout.reason, anchors.count, level.count,
                      level.budgets)  # fmt: skip


def _totals(
    ladders: list[list[Run]], budget: Budget, settings: SearchSettings, reaching: list[float], seconds
) -> tuple:
    """(runs, training FLOPs, wall seconds) of the search: `reaching[r]` trials at rung r, each costing the mean over
    the planned configs of their run there; the noise's first repeated rungs and the front's repeats on top; the
    seconds divided among the workers, with Ray's start and each trial's."""
    trained = [runs for runs in ladders if runs]
    ladder = budget.ladder
    layout = ladder.layout
    front = expected_front_size(round(reaching[-1]), len(settings.objectives))
    repeats = settings.repeat_seeds * front if ladder.kind != "single" else 0.0
    again = NOISE_REPEATS if ladder.is_replica and layout.rungs > 1 and trained else 0
    totals = []
    for value in (lambda r: r.flops, seconds):
        mean = _mean_per_rung(trained, value, budget)
        totals.append(sum(n * v for n, v in zip(reaching, mean, strict=True)) + again * mean[0] + repeats * sum(mean))
    runs = (sum(reaching) if ladder.kind != "budget" else reaching[0]) + again + repeats * layout.rungs
    return runs, totals[0], RAY_START_S + (totals[1] + TRIAL_START_S * reaching[0]) / settings.workers


def expected_front_size(n: int, objectives: int) -> float:
    """The expected number of Pareto-optimal points among `n` points whose `objectives` coordinates are independent
    and continuous: A(n, 1) = 1, A(n, d) = sum_{k<=n} A(k, d - 1) / k (the harmonic number H_n for two objectives).
    What the front's repeats are planned for: the front is not known before the search."""
    counts = [1.0] * (n + 1)
    for _ in range(1, objectives):
        total, nxt = 0.0, [0.0]
        for k in range(1, n + 1):
            total += counts[k] / k
            nxt.append(total)
        counts = nxt
    return counts[n] if n > 0 else 0.0


def climbing(n: float, eta: float) -> float:
    """How many of `n` trials reporting at a rung climb to the next, expected: the k-th climbs if it is among the
    best ceil(k / eta) of the k so far, which for trials in random order happens with probability ceil(k / eta) / k."""
    return sum(math.ceil(k / eta) / k for k in range(1, round(n) + 1))


def _budgets(layout: Layout) -> list[float]:
    return [layout.lowest_flops * layout.eta**r for r in range(layout.rungs)]


def _proposals(space: SearchSpace, budget: Budget, n: int) -> list[dict]:
    """`n` proposals of the space as a search's sampler makes its first ones (Optuna's RandomSampler, seeded),
    feasible ones first: what the plan averages over."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    out, feasible = [], []
    for _ in range(3 * n):
        trial = study.ask()
        params = suggest(space, trial)
        study.tell(trial, 0.0)
        try:
            arch, _, run = to_configs(space, params)
        except ValueError:
            continue
        (feasible if trial_is_feasible(arch, budget, run.batch_size) is None else out).append(params)
        if len(feasible) >= n:
            break
    return (feasible + out)[:n] or out[:1]


def _runs(arch: ArchConfig, budget: Budget, run: RunConfig) -> list[Run]:
    """The runs of `arch` climbing every rung: one per replica rung, or its one budget-ladder run (its top rung's
    steps, each lower rung's cooldown branch among them)."""
    ladder = budget.ladder
    if ladder.kind == "single":
        return [Run(0, budget.trial_flops, arch, plan_budget(arch, budget.trial_flops, run.batch_size).steps)]
    try:
        if ladder.is_replica:
            out = []
            for r, flops in enumerate(_budgets(ladder.layout)):
                replica = plan_replica(arch, ladder.target_flops, r, flops, run.batch_size, ladder.narrowing)
                out.append(Run(r, flops, replica.arch, replica.plan.steps))
            return out
        return [
            Run(r, flops, arch, plan_budget(arch, flops, run.batch_size).steps)
            for r, flops in enumerate(_budgets(ladder.layout))
        ]
    except InfeasibleBudget:
        return []


def _anchor_run(arch: ArchConfig, budget: Budget, flops: float, run: RunConfig) -> Run | None:
    """An anchor of `arch`: its replica at the anchor budget (None: infeasible)."""
    ladder = budget.ladder
    try:
        replica = plan_replica(arch, ladder.target_flops, ladder.layout.rungs, flops, run.batch_size, ladder.narrowing)
    except InfeasibleBudget:
        return None
    return Run(ladder.layout.rungs, flops, replica.arch, replica.plan.steps)


def _level_runs(arch: ArchConfig, budget: Budget, budgets: tuple[float, ...], run: RunConfig) -> list[Run]:
    """The level runs of `arch`: its replicas at the level budgets, narrowed as level rungs are (none infeasible)."""
    ladder, out = budget.ladder, []
    for k, flops in enumerate(budgets):
        try:
            replica = plan_replica(arch, ladder.target_flops, k, flops, run.batch_size, ladder.level_narrowing)
        except InfeasibleBudget:
            return []
        out.append(Run(k - len(budgets), flops, replica.arch, replica.plan.steps))
    return out


def _mean_per_rung(ladders: list[list[Run]], value, budget: Budget) -> list[float]:
    """Per rung, the mean over the configs of `value` of their run at that rung (a budget ladder's runs are nested:
    rung r's run is the part of the top run up to it, its cost the difference)."""
    out = []
    for r in range(budget.ladder.layout.rungs):
        values = [value(run) for runs in ladders for run in runs if run.rung == r]
        out.append(sum(values) / len(values) if values else 0.0)
    if budget.ladder.kind == "budget":
        out = [out[0], *(b - a for a, b in zip(out, out[1:], strict=False))]  # each rung adds its share of the run
    return out


def _widths(ladders: list[list[Run]], rung: int) -> tuple[int, int] | None:
    widths = [r.arch.d_model for runs in ladders for r in runs if r.rung == rung]
    return (min(widths), max(widths)) if widths else None


@dataclass(frozen=True)
class _Timing:
    """Seconds per training FLOP measured at the narrowest and the widest config, interpolated in log FLOPs per
    token between them (constant beyond)."""

    timed: tuple[tuple[str, float, float], ...]
    points: tuple[tuple[float, float], ...]  # (ln FLOPs per token, ln seconds per training FLOP)

    def per_flop(self, arch: ArchConfig) -> float:
        x = math.log(flops_per_token(arch).executed)
        (x0, y0), (x1, y1) = self.points[0], self.points[-1]
        if x1 <= x0:
            return math.exp(y0)
        w = min(max((x - x0) / (x1 - x0), 0.0), 1.0)
        return math.exp(y0 + w * (y1 - y0))

    def seconds(self, run: Run, settings: RunConfig) -> float:
        """The run's training steps, plus its evaluations and its width certificate (about a forward pass over the
        held-out sequences each, the certificate a backward one too)."""
        per_token = flops_per_token(run.arch).executed
        held_out = settings.eval_sequences * run.arch.seq_len * per_token * (settings.evals + 2)
        return (run.flops + held_out) * self.per_flop(run.arch)


def _timing(archs: list[ArchConfig], batch_size: int) -> _Timing:
    """A short measured step of the cheapest and the most expensive config (per token) at one thread."""
    if not archs:
        return _Timing((), ((0.0, 0.0),))
    chosen = sorted({min(archs, key=_cost), max(archs, key=_cost)}, key=_cost)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a trial's share: one CPU
    try:
        timed = [(a, measured_step_seconds(a, batch_size, OptimConfig())) for a in chosen]
    finally:
        torch.set_num_threads(threads)
    points = tuple((math.log(_cost(a)), math.log(step / (3 * _cost(a) * batch_size * a.seq_len))) for a, step in timed)
    return _Timing(tuple((Architecture.of(a).describe(), _cost(a), step) for a, step in timed), points)


def _cost(arch: ArchConfig) -> float:
    return flops_per_token(arch).executed
