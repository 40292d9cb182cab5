"""The learning-rate schedule a run follows, step by step: warmup-stable-decay by default, cosine on request,
the same in a plain run, a ladder of one rung, a replica rung and pretraining."""

import math

import pytest

from search_spaces.residual_lm import ArchConfig, flavour
from workers.data.config import DataConfig
from workers.data.corpus import load_corpus
from workers.ladder.plans import RungSpacing
from workers.ladder.trial_plan import LadderPlan
from workers.training.config import OptimConfig, RunConfig
from workers.training.train import train
from workers.trial.contract import TrialRequest
from workers.trial.replica import plan_replica, run_replica_trial
from workers.trial.run import run_trial

RUN = RunConfig(batch_size=4, eval_sequences=8, evals=1, report_every=1)  # a curve point every step


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return load_corpus(DataConfig(cache_dir=str(tmp_path_factory.mktemp("cache"))))


def tiny(**overrides):
    return flavour("debug", vocab_size=256, seq_len=32, **overrides)


def expected_wsd(steps: int, optim: OptimConfig) -> list[float]:
    """Written out here, apart from workers.training.schedules: warm-up over round(warmup x steps), lr, then a linear
    decay over the last round(cooldown x steps) steps, reaching lr x min_lr_ratio at the last one."""
    warm = max(1, round(optim.warmup * steps))
    start = steps - round(optim.cooldown * steps)
    out = []
    for s in range(steps):
        if s < warm:
            out.append(optim.lr * (s + 1) / warm)
        elif s < start:
            out.append(optim.lr)
        else:
            out.append(optim.lr * (1 - (1 - optim.min_lr_ratio) * (s + 1 - start) / (steps - start)))
    return out


def expected_cosine(steps: int, optim: OptimConfig) -> list[float]:
    warm = max(1, round(optim.warmup * steps))
    out = []
    for s in range(steps):
        if s < warm:
            out.append(optim.lr * (s + 1) / warm)
        else:
            progress = (s - warm) / max(1, steps - warm)
            out.append(
                optim.lr * (optim.min_lr_ratio + (1 - optim.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))
            )
    return out


def applied(curve: list) -> list[float]:
    """The rate each step ran at, from a curve reported at every step."""
    assert [p.step for p in curve] == list(range(1, len(curve) + 1))
    return [p.lr for p in curve]


def test_the_default_schedule_is_warmup_stable_decay_step_by_step(corpus):
    optim = OptimConfig(lr=4e-3, warmup=0.15, cooldown=0.3, min_lr_ratio=0.05)
    out = train(tiny(), 3e9, corpus, optim=optim, run=RUN)
    assert OptimConfig().schedule == "wsd" and out.plan.steps >= 20
    assert applied(out.state.curve) == pytest.approx(expected_wsd(out.plan.steps, optim), rel=1e-12)


def test_a_plain_wsd_run_is_a_ladder_of_one_rung_bit_for_bit(corpus):
    """The benchmark's truth runs are ladders of one rung: a search's plain runs must be exactly them."""
    cfg = tiny(residual="ancre", mod_rate=0.25)
    plain = train(cfg, 2e9, corpus, run=RUN, seed=4)
    one_rung = train(cfg, 2e9, corpus, run=RUN, seed=4, spacing=RungSpacing(rungs=1, eta=3.0))
    assert plain.state.val_loss == one_rung.state.val_loss
    assert [p.lr for p in plain.state.curve] == [p.lr for p in one_rung.state.curve]


def test_cosine_on_request_step_by_step_and_never_on_a_budget_ladder(corpus):
    optim = OptimConfig(lr=3e-3, schedule="cosine", warmup=0.1)
    out = train(tiny(), 3e9, corpus, optim=optim, run=RUN)
    assert applied(out.state.curve) == pytest.approx(expected_cosine(out.plan.steps, optim), rel=1e-12)
    failed = run_trial(
        tiny(), 9e9, corpus, optim=optim, run=RUN, spacing=RungSpacing(rungs=2, eta=3.0), width_probe=False
    )
    assert failed.status == "failed" and "schedule 'wsd'" in failed.failure_reason


@pytest.mark.parametrize("schedule", ["wsd", "cosine"])
def test_every_replica_rung_follows_the_target_runs_schedule(corpus, schedule):
    """Each replica is its own run at the target's schedule and shares: its rates are the schedule's over its
    own steps (the target's lr here: no horizon rule)."""
    target = ArchConfig(vocab_size=256, seq_len=32, n_layers=2, d_model=64, n_heads=2, residual="nag")
    optim = OptimConfig(lr=2e-3, schedule=schedule, warmup=0.2, cooldown=0.25)
    budgets = [2e9, 6e9]
    curves: list[list] = [[]]

    def report(point) -> None:
        if point.step == 1 and curves[-1]:
            curves.append([])
        curves[-1].append(point)

    measurement = LadderPlan(budgets[-1], None, tuple(budgets), 6e10)
    request = TrialRequest.of(target, measurement, optim=optim, run=RUN, width_probe=False)
    result = run_replica_trial(request, corpus, report=report)
    assert result.status == "completed" and len(curves) == len(budgets)
    expected = expected_wsd if schedule == "wsd" else expected_cosine
    for rung, (flops, curve) in enumerate(zip(budgets, curves, strict=True)):
        steps = plan_replica(target, 6e10, rung, flops, RUN.batch_size).plan.steps
        assert applied(curve) == pytest.approx(expected(steps, optim), rel=1e-12)
    assert result.optim is not None and (result.optim.schedule, result.optim.cooldown) == (schedule, 0.25)
