"""The budget ladder: iso-FLOP rungs, warmup-stable-decay, and cooldown branches that leave the main run alone."""

import importlib
import math
from dataclasses import replace

import pytest
import torch

from search_spaces.residual_lm import flavour, tokens_for
from workers.data.config import DataConfig
from workers.data.corpus import load_corpus
from workers.ladder.plans import InfeasibleBudget, RungSpacing, plan_budget, plan_ladder
from workers.training.config import OptimConfig, RunConfig
from workers.training.schedules import wsd_learning_rate
from workers.training.train import train

train_module = importlib.import_module("workers.training.train")  # the package exports a function of that name
RUN = RunConfig(batch_size=4, eval_sequences=8, evals=2, report_every=5)
OPTIM = OptimConfig(lr=3e-3, warmup=0.2, min_lr_ratio=0.1, cooldown=0.25)
LADDER = RungSpacing(rungs=3, eta=3.0)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return load_corpus(DataConfig(cache_dir=str(tmp_path_factory.mktemp("cache"))))


def tiny(**overrides):
    return flavour("debug", vocab_size=256, seq_len=32, **overrides)


def top_budget(cfg, steps: int) -> float:
    """The training FLOPs of `steps` batches of RUN's size."""
    return steps * RUN.batch_size * cfg.seq_len / tokens_for(cfg, 1.0)


@pytest.mark.parametrize("mod_rate", [0.0, 0.25])
def test_rungs_are_geometric_and_iso_flop(mod_rate):
    cfg = tiny(residual="nag", mod_rate=mod_rate)
    top = top_budget(cfg, 90)
    rungs = plan_ladder(cfg, top, LADDER, RUN.batch_size)
    assert [r.budget_flops for r in rungs] == pytest.approx([top / 9, top / 3, top])
    for rung in rungs:  # each rung's tokens follow from its own FLOPs, as a single-budget run's would
        assert rung.plan == plan_budget(cfg, rung.budget_flops, RUN.batch_size)
    assert [r.steps for r in rungs] == [10, 30, 90]
    assert [r.decay_start(0.25) for r in rungs] == [10 - 2, 30 - 8, 90 - 22]  # round(0.25 x steps) each
    with pytest.raises(InfeasibleBudget):  # the lowest rung must pay for a step
        plan_ladder(cfg, top_budget(cfg, 8), LADDER, RUN.batch_size)


def test_wsd_schedule_warms_up_holds_then_decays_to_the_floor():
    lrs = [wsd_learning_rate(s, 1.0, 0.1, warmup_steps=4, decay_start=12, decay_end=20) for s in range(20)]
    assert lrs[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert lrs[4:12] == [1.0] * 8
    assert all(a > b for a, b in zip(lrs[11:], lrs[12:], strict=False))
    assert lrs[-1] == pytest.approx(0.1)  # the rung's last step runs at lr x min_lr_ratio


@pytest.mark.parametrize(
    "family", ["cascaded", pytest.param("nag", marks=pytest.mark.slow), pytest.param("ancre", marks=pytest.mark.slow)]
)
def test_a_rungs_branch_equals_a_run_that_stops_at_that_rung(corpus, family):
    """Rung r measured on a branch of the 3-rung run gives exactly the loss of a run whose top rung is r:
    equal fractions of its own schedule, never the middle of a longer one."""
    cfg = tiny(residual=family, mod_rate=0.25 if family == "nag" else 0.0)
    top = top_budget(cfg, 36)
    full = train(cfg, top, corpus, optim=OPTIM, run=RUN, seed=3, spacing=LADDER)
    assert [r.rung for r in full.state.rungs] == [0, 1, 2]
    shorter = train(cfg, top / 3, corpus, optim=OPTIM, run=RUN, seed=3, spacing=RungSpacing(rungs=2, eta=3.0))
    assert full.state.rungs[1].val_loss == shorter.state.rungs[1].val_loss == shorter.state.val_loss
    assert full.state.rungs[1].tokens == shorter.state.tokens_seen
    assert full.state.rungs[1].training_flops == pytest.approx(shorter.state.training_flops, rel=1e-12)
    timeless = [replace(r, train_seconds=None) for r in (full.state.rungs[0], shorter.state.rungs[0])]
    assert timeless[0] == timeless[1]
    assert full.state.rungs[2].val_loss == full.state.val_loss
    assert full.state.branch_flops > 0


def test_cooldown_branches_leave_the_main_run_bit_exact(corpus, monkeypatch):
    cfg = tiny(residual="ancre", mod_rate=0.25)
    top = top_budget(cfg, 45)
    with_branches = train(cfg, top, corpus, optim=OPTIM, run=RUN, seed=5, spacing=LADDER)

    def no_branch(model, opt, batches, val, optim, run, device, state, schedule, rung, seed):
        state.rungs.append(train_module._rung_record(rung, 1.0, state, state.training_flops, seed))  # measures nothing
        return model, state

    monkeypatch.setattr(train_module, "_measure_rung_on_a_branch", no_branch)
    without = train(cfg, top, corpus, optim=OPTIM, run=RUN, seed=5, spacing=LADDER)
    assert without.state.branch_flops == 0 and with_branches.state.branch_flops > 0
    for (name, a), (_, b) in zip(
        with_branches.model.state_dict().items(), without.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name  # weights and the MoD routers' thresholds
    assert with_branches.state.curve == without.state.curve
    assert with_branches.state.val_loss == without.state.val_loss


def test_on_rung_ends_the_run_at_a_rung_as_its_cooled_branch(corpus):
    cfg = tiny(residual="cascaded")
    seen = []

    def promote_once(result) -> bool:
        seen.append(result.rung)
        return result.rung < 1

    top = top_budget(cfg, 45)
    out = train(cfg, top, corpus, optim=OPTIM, run=RUN, spacing=LADDER, on_rung=promote_once)
    rung1 = plan_ladder(cfg, top, LADDER, RUN.batch_size)[1]
    assert seen == [0, 1] and out.status == "completed"
    assert out.state.val_loss == out.state.rungs[1].val_loss and math.isfinite(out.state.val_loss)
    # The run is what the rung measured: its steps, tokens and FLOPs, and the cooled model.
    assert (out.state.step, out.state.tokens_seen, out.plan) == (rung1.steps, rung1.plan.tokens, rung1.plan)
    assert out.state.training_flops == out.state.rungs[1].training_flops
    assert train_module.evaluate(out.model, out.val_batches, RUN.precision) == out.state.val_loss


def test_a_ladder_run_that_diverges_ends_as_diverged(corpus):
    cfg = tiny(residual="cascaded")
    absurd = OPTIM.model_copy(update={"lr": 1e6, "grad_clip": 1e9})
    out = train(cfg, top_budget(cfg, 45), corpus, optim=absurd, run=RUN, spacing=LADDER)
    assert out.status == "diverged" and "non-finite" in out.failure_reason
