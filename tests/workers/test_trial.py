"""run_trial end to end on the shipped corpus: every family, and every way a trial can fail."""

import math

import pytest

from search_spaces.residual_lm import flavour
from workers.data.config import DataConfig
from workers.data.corpus import load_corpus
from workers.training.config import OptimConfig, RunConfig
from workers.trial.result import TrialResult
from workers.trial.run import run_trial

# Far outside OptimConfig's accepted range on purpose: forces NaN/inf within a few steps.
ABSURD = OptimConfig(warmup=0, grad_clip=1e9).model_copy(update={"lr": 1e6})
RUN = RunConfig(batch_size=4, eval_sequences=16, evals=2, report_every=5)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return load_corpus(DataConfig(cache_dir=str(tmp_path_factory.mktemp("cache"))))


@pytest.mark.parametrize("family", ["cascaded", "nag", "ancre"])
def test_run_trial_end_to_end(corpus, family):
    cfg = flavour("debug", vocab_size=256, seq_len=32, residual=family, mod_rate=0.25)
    points = []
    result = run_trial(cfg, 4e9, corpus, seed=0, report=points.append, run=RUN)
    assert result.status == "completed", result.failure_reason
    assert math.isfinite(result.val_loss) and result.val_loss < math.log(256)  # learned something
    assert result.val_bpb == pytest.approx(result.val_loss / math.log(2))
    assert result.tokens_seen == result.planned_tokens > 0
    assert result.training_flops > 0 and result.peak_memory_mb > 0
    assert points and points[-1].tokens == result.tokens_seen
    assert result.width is not None and result.width.d_align > 0 and 0 <= result.width.p_hat_8_8 <= 1
    assert set(result.diagnostics["skip_rate"])
    assert result.arch is not None and result.arch.residual == family and result.curve
    assert TrialResult.from_dict(result.to_dict()) == result  # what the spool keeps while the store is down


def test_divergence_is_recorded_not_raised(corpus):
    cfg = flavour("debug", vocab_size=256, seq_len=32)
    result = run_trial(cfg, 2e9, corpus, optim=ABSURD, run=RUN)
    assert result.status == "diverged" and result.val_loss == math.inf
    assert "non-finite" in result.failure_reason


def test_infeasible_budget_is_recorded(corpus):
    result = run_trial(flavour("debug", vocab_size=256), 10.0, corpus, run=RUN)
    assert result.status == "infeasible" and result.val_loss == math.inf
    assert "one step" in result.failure_reason


def test_a_crash_is_recorded_with_its_reason(corpus):
    cfg = flavour("debug", vocab_size=64)  # byte corpus: token ids up to 255
    result = run_trial(cfg, 1e12, corpus, run=RUN)
    assert result.status == "failed" and result.val_loss == math.inf
    assert "vocab_size=64" in result.failure_reason and "\n" not in result.failure_reason


@pytest.mark.parametrize("family", ["cascaded", "nag"])
def test_a_predictor_routed_trial_completes_and_is_diagnosed_by_its_predictor(corpus, family):
    """mod_routing="predictor" end to end: the trial learns, and its diagnostics (an evaluation-mode forward, where
    the predictor decides) record a skip rate per router. That the trainer trains the predictor is the next test's."""
    cfg = flavour(
        "debug", vocab_size=256, seq_len=32, residual=family, mod_rate=0.5, mod_routing="predictor", n_layers=2
    )
    result = run_trial(cfg, 4e9, corpus, seed=0, run=RUN, width_probe=False)
    assert result.status == "completed", result.failure_reason
    assert math.isfinite(result.val_loss) and result.val_loss < math.log(256)
    skip = result.diagnostics["skip_rate"]  # recorded in evaluation mode: the predictor's decisions
    assert skip and all(0.2 < rate < 0.8 for rate in skip.values())


@pytest.mark.parametrize("with_aux", [True, False])
def test_the_train_step_adds_the_predictors_loss(corpus, with_aux):
    """Only the predictors' cross-entropy moves the predictors (the LM loss cannot reach them)."""
    import torch

    from search_spaces.residual_lm import build_model
    from workers.training.checkpoints import TrainState
    from workers.training.train import _train_step, build_optimizer

    cfg = flavour("debug", vocab_size=256, seq_len=32, mod_rate=0.5, mod_routing="predictor")
    model = build_model(cfg).train()
    if not with_aux:
        model.auxiliary_loss = lambda: None  # the trainer as it was: LM loss only
    optim = OptimConfig()
    opt = build_optimizer(model, optim)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if ".predictor." in n}
    batch = (corpus.train[:64].long().view(2, 32), corpus.train[1:65].long().view(2, 32))
    _train_step(model, opt, batch, 1e-2, optim, "fp32", torch.device("cpu"), TrainState())
    moved = [n for n, p in model.named_parameters() if n in before and not torch.equal(p, before[n])]
    assert bool(moved) == with_aux
