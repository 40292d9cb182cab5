"""Replica rungs: widths, tokens per parameter, compute, the full-width replica, and the rung sequence."""

import math

import pytest
import torch

from search_spaces.residual_lm import ArchConfig, build_model, count_parameters, flavour, flops_per_token
from search_spaces.residual_lm.parametrization import attention_scale
from workers.data.config import DataConfig
from workers.data.corpus import load_corpus
from workers.ladder.narrowing import KEEP_HEADS
from workers.ladder.trial_plan import LadderPlan
from workers.training.config import OptimConfig, RunConfig
from workers.trial.contract import REMEASURE_SEED_OFFSET, TrialRequest, Verdict
from workers.trial.replica import (
    Narrowing,
    plan_replica,
    replica_arch,
    replica_widths,
    run_replica_trial,
    target_path,
)
from workers.trial.run import run_trial

RUN = RunConfig(batch_size=4, eval_sequences=8, evals=1, report_every=1000)
TARGET = ArchConfig(vocab_size=256, seq_len=32, n_layers=2, d_model=64, n_heads=2, residual="nag", mod_rate=0.25)
T = 4e10


def replicas(target: ArchConfig, target_flops: float, rung_flops, seed: int = 0, optim=OptimConfig()) -> TrialRequest:
    """A request for `target` measured on replica rungs of `rung_flops` (lowest first) on its path to `target_flops`."""
    measurement = LadderPlan(rung_flops[-1], None, tuple(rung_flops), target_flops)
    return TrialRequest.of(target, measurement, optim=optim, run=RUN, seed=seed, width_probe=False)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return load_corpus(DataConfig(cache_dir=str(tmp_path_factory.mktemp("cache"))))


def params(cfg: ArchConfig) -> int:
    return count_parameters(build_model(cfg))


def on_path_flops(cfg: ArchConfig, tokens_per_param: float) -> float:
    return 3 * flops_per_token(cfg).executed * tokens_per_param * params(cfg)


@pytest.mark.parametrize("share", [0.5, 0.2, 0.1, 0.03])
def test_a_replica_costs_the_rung_budget_at_the_nearest_width_on_the_target_path(share):
    path = target_path(TARGET, T, RUN.batch_size)
    assert path.params == params(TARGET) and path.tokens_per_param == path.tokens / path.params
    replica = plan_replica(TARGET, T, 1, share * T, RUN.batch_size, KEEP_HEADS)
    arch = replica.arch
    # Valid: an even head size at the target's head count, narrower than the target, nothing else changed.
    assert arch.d_model % (2 * TARGET.n_heads) == 0 and 8 <= arch.d_model < TARGET.d_model
    assert arch.model_dump(exclude={"d_model", "parametrization", "base_width", "base_depth"}) == TARGET.model_dump(
        exclude={"d_model", "parametrization", "base_width", "base_depth"}
    )
    assert (arch.parametrization, arch.base_width, arch.base_depth) == ("completep", 64, 2)
    # Compute: the rung budget, to half a batch of tokens.
    batch_flops = 3 * flops_per_token(arch).executed * RUN.batch_size * arch.seq_len
    assert abs(3 * flops_per_token(arch).executed * replica.plan.tokens - share * T) <= batch_flops / 2 + 1e-6
    # Tokens per parameter: the target's, up to the width grid; by brute force no valid width is nearer.
    widths = replica_widths(TARGET, KEEP_HEADS)
    costs = {w: on_path_flops(replica_arch(TARGET, w, KEEP_HEADS), path.tokens_per_param) for w in widths}
    assert replica.on_path and min(costs.values()) <= share * T
    nearest = min(widths, key=lambda w: abs(math.log(costs[w] / (share * T))))
    assert arch.d_model == nearest and replica.params == params(arch)
    i = widths.index(nearest)
    step = max(
        costs[widths[min(i + 1, len(widths) - 1)]] / costs[nearest], costs[nearest] / costs[widths[max(i - 1, 0)]]
    )
    assert abs(math.log(replica.tokens_per_param / path.tokens_per_param)) <= math.log(step) + 0.05


def test_at_the_target_budget_the_replica_is_the_target_and_its_tokens():
    replica = plan_replica(TARGET, T, 3, T, RUN.batch_size)
    assert replica.arch.d_model == TARGET.d_model and replica.on_path
    assert replica.plan.tokens == target_path(TARGET, T, RUN.batch_size).tokens


def test_below_the_narrowest_on_path_replica_the_rung_is_marked_off_the_path():
    """The rule: the narrowest valid width, trained for what the budget buys (fewer tokens per parameter)."""
    narrowest = replica_arch(TARGET, replica_widths(TARGET)[0])
    path = target_path(TARGET, T, RUN.batch_size)
    budget = 0.5 * on_path_flops(narrowest, path.tokens_per_param)
    replica = plan_replica(TARGET, T, 0, budget, RUN.batch_size)
    assert not replica.on_path and replica.arch == narrowest
    assert replica.tokens_per_param < path.tokens_per_param
    assert replica.params == params(narrowest)


def test_keeping_the_head_count_widths_are_multiples_of_twice_the_heads_and_a_completep_target_keeps_its_base():
    four = TARGET.model_copy(update={"n_heads": 4, "d_model": 96})
    assert replica_widths(four, KEEP_HEADS) == [8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96]
    assert replica_widths(four, KEEP_HEADS.model_copy(update={"min_width": 20})) == [
        24,
        32,
        40,
        48,
        56,
        64,
        72,
        80,
        88,
        96,
    ]
    assert replica_widths(four, KEEP_HEADS.model_copy(update={"min_share": 0.5})) == [48, 56, 64, 72, 80, 88, 96]
    tuned = TARGET.model_copy(update={"parametrization": "completep", "base_width": 32, "base_depth": 4})
    assert (replica_arch(tuned, 16).base_width, replica_arch(tuned, 16).base_depth) == (32, 4)
    assert replica_arch(tuned, tuned.d_model) == tuned


def test_by_default_a_replica_keeps_the_head_size_no_narrower_than_half_the_target_scaled_as_at_the_target():
    four = TARGET.model_copy(update={"n_heads": 4, "d_model": 96})
    assert replica_widths(four) == replica_widths(four, Narrowing(min_share=0.5, keep="head_size")) == [48, 72, 96]
    narrow = replica_arch(four, 48)
    assert (narrow.n_heads, narrow.head_dim, narrow.d_model) == (2, 24, 48)
    assert attention_scale(narrow) == pytest.approx(attention_scale(four))
    kept_heads = replica_arch(four, 48, KEEP_HEADS)
    assert kept_heads.n_heads == 4 and kept_heads.head_dim == 12


@pytest.mark.parametrize("residual", ["cascaded", "nag", "ancre"])
def test_the_full_width_replica_trains_bit_for_bit_as_the_standard_target(corpus, residual):
    target = flavour("debug", vocab_size=256, seq_len=32, residual=residual, mod_rate=0.25)
    budget = 3 * flops_per_token(target).executed * RUN.batch_size * target.seq_len * 12
    optim = OptimConfig(lr=3e-3)
    plain = run_trial(target, budget, corpus, seed=3, optim=optim, run=RUN, width_probe=False)
    replica = run_replica_trial(replicas(target, budget, [budget], seed=3, optim=optim), corpus)
    assert plain.status == replica.status == "completed"
    assert replica.val_loss == plain.val_loss and replica.training_flops == plain.training_flops
    assert [p.train_loss for p in replica.curve] == [p.train_loss for p in plain.curve]
    assert replica.rungs[0].d_model == target.d_model and replica.rungs[0].on_path is True


def test_rungs_run_in_order_until_the_decider_stops_them_and_the_result_describes_the_target(corpus):
    budgets = [T / 16, T / 8, T / 4]
    told = []

    def on_rung(rung) -> Verdict:
        told.append(rung)
        return Verdict.CLIMB if rung.rung < 1 else Verdict.STOP  # promote from rung 0 only

    out = run_replica_trial(replicas(TARGET, T, budgets), corpus, on_rung=on_rung)
    assert out.status == "completed" and [r.rung for r in out.rungs] == [0, 1] and told == out.rungs
    widths = [r.d_model for r in out.rungs]
    assert widths[0] <= widths[1] < TARGET.d_model
    assert out.arch == TARGET and out.executed_flops_per_token == flops_per_token(TARGET).executed
    assert out.val_loss == out.rungs[-1].val_loss and out.budget_flops == budgets[1]
    assert out.training_flops == pytest.approx(sum(r.training_flops for r in out.rungs))
    for rung, budget in zip(out.rungs, budgets, strict=False):
        assert rung.training_flops == pytest.approx(budget, rel=0.25)  # realised MoD rate, whole batches
        assert rung.tokens_per_param == pytest.approx(rung.tokens / rung.params)


def test_the_decider_is_told_the_top_rung_too(corpus):
    told = []
    out = run_replica_trial(
        replicas(TARGET, T, [T / 16, T / 8]), corpus, on_rung=lambda r: told.append(r) or Verdict.CLIMB
    )
    assert [r.rung for r in told] == [0, 1] and told == out.rungs


def test_a_rung_measured_again_runs_another_seed_and_the_trial_reports_the_seed_mean(corpus):
    """measure_again: the rung's replica is trained once more with seed + REMEASURE_SEED_OFFSET (a run of its own,
    bit for bit what `run_trial` gives with that seed) and the decider decides on being told it."""
    told = []

    def on_rung(rung) -> Verdict:
        told.append(rung)
        return Verdict.MEASURE_AGAIN if len(told) == 1 else Verdict.STOP

    out = run_replica_trial(replicas(TARGET, T, [T / 16, T / 8], seed=3), corpus, on_rung=on_rung)
    again = 3 + REMEASURE_SEED_OFFSET
    assert [(r.rung, r.seed) for r in told] == [(0, 3), (0, again)] and out.rungs == told
    alone = run_trial(plan_replica(TARGET, T, 0, T / 16, RUN.batch_size).arch, T / 16, corpus, again, run=RUN,
                      width_probe=False)  # fmt: skip
    assert told[1].val_loss == alone.val_loss and told[0].val_loss != told[1].val_loss
    assert out.val_loss == pytest.approx((told[0].val_loss + told[1].val_loss) / 2, rel=1e-12)
    assert out.training_flops == pytest.approx(told[0].training_flops + told[1].training_flops)


def test_a_diverging_replica_ends_the_trial_as_diverged_with_no_loss(corpus):
    absurd = OptimConfig(warmup=0, grad_clip=1e9).model_copy(update={"lr": 1e6})
    out = run_replica_trial(replicas(TARGET, T, [T / 16, T / 8], optim=absurd), corpus)
    assert out.status == "diverged" and math.isinf(out.val_loss) and out.rungs == []
    assert out.arch == TARGET


def test_meta_parameter_count_matches_a_real_build():
    torch.manual_seed(0)
    assert target_path(TARGET, T, RUN.batch_size).params == params(TARGET)


@pytest.mark.parametrize("residual", ["cascaded", "nag", "ancre"])
def test_a_replicas_per_layer_scalars_learn_at_the_targets_rate_and_its_matrices_at_muPs(residual):
    """Per family: the tensors that do not grow with width (NAG's alphas, gates' mixture logits, sharpness and
    biases, its norm lane's encoder gain; ANCRe's connectivity logits) take the target's learning rate in a replica
    half as wide; the hidden matrices take muP's 1 / m_d = 2 times it."""
    from workers.training.train import build_optimizer

    target = ArchConfig(vocab_size=256, seq_len=32, n_layers=4, d_model=64, n_heads=2, residual=residual)
    full, half = (build_model(replica_arch(target, w)) for w in (64, 32))
    optim = OptimConfig(lr=3e-3)

    def lr_scales(model) -> dict[str, float]:
        opt = build_optimizer(model, optim)
        group_of = {id(p): g["lr_scale"] for g in opt.param_groups for p in g["params"]}
        return {n: group_of[id(p)] for n, p in model.named_parameters()}

    wide, narrow = lr_scales(full), lr_scales(half)
    scalars = [n for n, p in full.named_parameters() if p.dim() < 2 and not n.endswith("norm.weight")]
    scalars = [n for n in scalars if "norm" not in n or n.endswith("g_encode")]
    expected = {"cascaded": set(), "nag": {"alpha", "mix_logits", "beta_raw", "pre.bias", "g_encode"},
                "ancre": {"connectivity.logits"}}[residual]  # fmt: skip
    assert {s for s in expected if any(n.endswith(s) for n in scalars)} == expected
    for name in scalars:
        assert narrow[name] == pytest.approx(wide[name]), name
    for name in (n for n in wide if n.endswith(("qkv.weight", "w_in.weight"))):
        assert narrow[name] == pytest.approx(2.0 * wide[name]), name
