"""`nas families` trains each variant with the project's trainer: the same run a search's trainer gives."""

import math

import pytest

from nas.cli.families import train_briefly
from search_spaces.residual_lm import flavour, training_flops
from workers.data.config import DataConfig
from workers.data.corpus import load_corpus
from workers.training.config import OptimConfig, RunConfig
from workers.training.train import train


@pytest.mark.slow
def test_a_variant_is_the_trainers_run_of_that_many_steps():
    corpus = load_corpus(DataConfig())  # the shipped corpus, as `nas families` trains on
    cfg = flavour("debug", vocab_size=256, seq_len=32, residual="nag", mod_rate=0.25)
    row = train_briefly(cfg, corpus, steps=3, batch=2, seed=1)
    run = RunConfig(batch_size=2, evals=1, report_every=1)
    same = train(cfg, training_flops(cfg, 3 * 2 * cfg.seq_len), corpus, optim=OptimConfig(), run=run, seed=1)
    assert same.state.step == 3 and row.val_loss == same.state.val_loss and math.isfinite(row.val_loss)
    assert row.first_loss == same.state.curve[0].train_loss
    assert row.executed_flops < row.nominal_flops  # MoD skipped some of the routed sublayers
