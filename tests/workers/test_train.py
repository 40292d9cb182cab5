"""Iso-FLOP proxy training: budgets, divergence, resume, determinism."""

import math

import pytest

from search_spaces.residual_lm import flavour, flops_per_token
from workers.data.config import DataConfig
from workers.data.corpus import load_corpus
from workers.ladder.plans import InfeasibleBudget, plan_budget
from workers.training.config import OptimConfig, RunConfig
from workers.training.schedules import cosine_learning_rate
from workers.training.train import train

# Far outside OptimConfig's accepted range on purpose: forces NaN/inf within a few steps.
ABSURD = OptimConfig(warmup=0, grad_clip=1e9).model_copy(update={"lr": 1e6})
RUN = RunConfig(batch_size=4, eval_sequences=8, evals=2, report_every=2)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return load_corpus(DataConfig(cache_dir=str(tmp_path_factory.mktemp("cache"))))


def tiny(**overrides):
    return flavour("debug", vocab_size=256, seq_len=32, **overrides)


@pytest.mark.parametrize("mod_rate", [0.0, 0.25])
def test_tokens_trained_match_the_budget_formula(corpus, mod_rate):
    cfg = tiny(residual="nag", mod_rate=mod_rate)
    per_token = flops_per_token(cfg).executed
    budget = 3 * per_token * 4 * 32 * 10.4  # 10.4 batches' worth of tokens
    out = train(cfg, budget, corpus, run=RUN)
    formula = budget / (3 * per_token)
    assert out.status == "completed"
    assert abs(out.state.tokens_seen - formula) <= 4 * 32  # within one batch
    doubled = plan_budget(cfg, 2 * budget, RUN.batch_size)
    assert abs(doubled.tokens - 2 * formula) <= 4 * 32
    assert doubled.steps == pytest.approx(2 * out.plan.steps, abs=1)


def test_mod_trains_on_more_tokens_for_the_same_compute(corpus):
    budget = 5e9
    dense = plan_budget(tiny(residual="cascaded"), budget, 4)
    sparse = plan_budget(tiny(residual="cascaded", mod_rate=0.5), budget, 4)
    assert sparse.tokens > dense.tokens
    assert sparse.tokens * sparse.executed_flops_per_token == pytest.approx(
        dense.tokens * dense.executed_flops_per_token, rel=0.05
    )


def test_training_flops_count_the_pairs_actually_executed(corpus):
    cfg = tiny(residual="cascaded", mod_rate=0.25)
    out = train(cfg, 3e9, corpus, run=RUN)
    spent_per_token = out.state.training_flops / (3 * out.state.tokens_seen)
    fpt = flops_per_token(cfg)
    assert spent_per_token < fpt.nominal  # routed sublayers really skipped pairs
    assert spent_per_token == pytest.approx(fpt.executed, rel=0.05)  # realised rate tracks the target
    assert spent_per_token != fpt.executed  # counted from the realised pairs, not copied from the plan


def test_an_absurd_learning_rate_diverges_without_raising(corpus):
    out = train(tiny(residual="cascaded"), 2e9, corpus, optim=ABSURD, run=RUN)
    assert out.status == "diverged"
    assert "non-finite" in out.failure_reason


def test_budget_below_one_step_is_infeasible():
    with pytest.raises(InfeasibleBudget, match="one step"):
        plan_budget(tiny(), 1e3, 4)


def test_same_seed_same_run_different_seed_different_run(corpus):
    a = train(tiny(residual="ancre"), 2e9, corpus, run=RUN, seed=1)
    b = train(tiny(residual="ancre"), 2e9, corpus, run=RUN, seed=1)
    c = train(tiny(residual="ancre"), 2e9, corpus, run=RUN, seed=2)
    assert a.state.val_loss == b.state.val_loss
    assert a.state.val_loss != c.state.val_loss


class _Interrupt(Exception):
    pass


@pytest.mark.parametrize("family", ["cascaded", "nag"])
def test_resume_from_checkpoint_matches_an_uninterrupted_run(corpus, tmp_path, family):
    cfg = tiny(residual=family, mod_rate=0.25)
    budget = 3 * flops_per_token(cfg).executed * 4 * 32 * 12
    straight = train(cfg, budget, corpus, run=RUN.model_copy(update={"report_every": 1}), seed=3)

    def crash_at_step_7(point):
        if point.step >= 7:
            raise _Interrupt

    run = RUN.model_copy(update={"checkpoint_dir": str(tmp_path), "checkpoint_every": 2, "report_every": 1})
    with pytest.raises(_Interrupt):
        train(cfg, budget, corpus, run=run, seed=3, report=crash_at_step_7)
    points = []
    resumed = train(cfg, budget, corpus, run=run, seed=3, report=points.append)
    # It resumed from the step-6 checkpoint (a fresh start with the same seed would report step 1 first)
    # and reported what the uninterrupted run did from step 7 on.
    assert points and points[0].step == 7
    assert points == straight.state.curve[6:]
    assert resumed.status == "completed" and resumed.state.step == straight.state.step
    assert resumed.state.val_loss == straight.state.val_loss
    assert resumed.state.tokens_seen == straight.state.tokens_seen


def test_learning_rate_warms_up_then_decays():
    optim = OptimConfig(lr=1e-2, warmup=0.1, min_lr_ratio=0.1)
    lrs = [cosine_learning_rate(s, 100, optim.lr, optim.min_lr_ratio, optim.warmup) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-3) and lrs[9] == pytest.approx(1e-2)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:], strict=False))
    assert lrs[-1] == pytest.approx(1e-3, rel=0.01)


def test_report_can_stop_a_run_early(corpus):
    out = train(tiny(), 5e9, corpus, run=RUN, report=lambda p: p.step >= 4)
    assert out.status == "stopped" and out.state.step == 4
    assert all(math.isfinite(p.train_loss) for p in out.state.curve)


def test_the_horizon_rule_scales_the_rate_by_the_run_length_per_family():
    optim = OptimConfig(lr=2e-3, horizon_tokens=1000, horizon_exponents={"nag": 0.5, "ancre": -0.25})
    assert optim.at_horizon("nag", 4000).lr == pytest.approx(1e-3)  # 4x the horizon: 4^-0.5
    assert optim.at_horizon("ancre", 16000).lr == pytest.approx(4e-3)  # 16^0.25
    assert optim.at_horizon("cascaded", 4000).lr == 2e-3  # no exponent: beta 0
    applied = optim.at_horizon("nag", 4000)
    assert applied.horizon_tokens is None and applied.at_horizon("nag", 4000) == applied  # never twice
    assert OptimConfig(lr=2e-3).at_horizon("nag", 4000).lr == 2e-3  # off by default
    clamped = optim.model_copy(update={"horizon_span": (500, 2000)})  # the horizons beta was measured over
    assert clamped.at_horizon("nag", 1_000_000).lr == pytest.approx(2e-3 * 2**-0.5)  # as at 2000 tokens
    assert clamped.at_horizon("nag", 10).lr == pytest.approx(2e-3 * 2**0.5)  # as at 500
    with pytest.raises(ValueError, match="horizon_span"):
        OptimConfig(horizon_span=(2000, 500))


@pytest.mark.parametrize("family", ["nag", "cascaded"])
def test_a_run_under_the_horizon_rule_is_the_run_at_the_rate_it_implies(corpus, family):
    """The rule only moves the base rate: a run of D tokens under it is bit-exactly the plain run at
    lr (D / horizon)^-beta, NAG's capped gate rate included; without the rule nothing changes."""
    cfg, budget = tiny(residual=family), 2e9
    tokens = plan_budget(cfg, budget, RUN.batch_size).tokens
    ruled = OptimConfig(lr=3e-3, horizon_tokens=tokens // 8, horizon_exponents={family: 0.4})
    implied = OptimConfig(lr=3e-3 * 8**-0.4)
    a = train(cfg, budget, corpus, run=RUN, optim=ruled)
    b = train(cfg, budget, corpus, run=RUN, optim=implied)
    c = train(cfg, budget, corpus, run=RUN, optim=OptimConfig(lr=3e-3))
    assert a.state.val_loss == b.state.val_loss
    assert a.state.val_loss != c.state.val_loss


@pytest.mark.parametrize("family", ["cascaded", "nag"])
def test_the_fused_optimizer_step_is_the_per_tensor_step_to_rounding(corpus, family):
    """build_optimizer's fused AdamW (every group: decayed, undecayed, NAG's capped gates) makes the
    update the per-tensor loop makes, to fp32 rounding, over a run of steps."""
    import torch

    from search_spaces.residual_lm import build_model
    from workers.training.train import TrainState, _train_step, build_optimizer

    cfg = tiny(residual=family)
    optim = OptimConfig(weight_decay=0.1)
    models, opts = [], []
    for fused in (True, False):
        torch.manual_seed(0)
        models.append(build_model(cfg).train())
        opts.append(build_optimizer(models[-1], optim))
        if not fused:
            for group in opts[-1].param_groups:
                group["fused"] = None  # torch's per-tensor loop on CPU
    assert opts[0].defaults["fused"] is True and len(opts[0].param_groups) == len(opts[1].param_groups)
    tokens = corpus.train[: 20 * 33].long().view(20, 33)
    for step in range(10):
        batch = (tokens[2 * step : 2 * step + 2, :-1], tokens[2 * step : 2 * step + 2, 1:])
        losses = [
            _train_step(model, opt, batch, 3e-3, optim, "fp32", torch.device("cpu"), TrainState())
            for model, opt in zip(models, opts, strict=True)
        ]
        assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    torch.manual_seed(0)
    initial = build_model(cfg).state_dict()
    params = [dict(model.named_parameters()) for model in models]
    assert sum(not torch.equal(p, initial[name]) for name, p in params[0].items()) == len(params[0])  # all moved
    for name, p in params[0].items():
        torch.testing.assert_close(p, params[1][name], rtol=1e-5, atol=1e-6, msg=name)
