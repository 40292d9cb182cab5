"""`nas pretrain` end to end on the CPU: a real proxy trial, exported, retrained with the same loop.

Checks the budget rules, that frozen ANCRe coefficients stay exactly the exported p (no gradient),
that MoD thresholds are loaded, that a stopped run resumes from its checkpoint to the very same
final loss and weights as an uninterrupted one, and data parallelism over two gloo processes.
"""

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import workers.pretrain.run as pretrain_module
from nas.export import export_configs
from nas.store import Store
from search_spaces.residual_lm import ArchConfig, build_model, flops_per_token
from workers.data.config import DataConfig
from workers.data.corpus import load_corpus
from workers.pretrain.data_parallel import Parallel
from workers.pretrain.export_format import ExportedConfig, load_exported
from workers.pretrain.run import PretrainError, apply_export, budget_for, frozen_logits, model_hook, pretrain
from workers.training.config import RunConfig
from workers.training.train import train
from workers.trial.run import run_trial

ROOT = Path(__file__).resolve().parents[2]
ARCH = ArchConfig(
    vocab_size=256, seq_len=32, n_layers=2, d_model=32, n_heads=2, residual="ancre", mod_rate=0.25, mod_every=1
)
TOKENS = 20_000


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> DataConfig:
    cfg = DataConfig(cache_dir=str(tmp_path_factory.mktemp("cache")))
    load_corpus(cfg)  # build the cache once
    return cfg


@pytest.fixture(scope="module")
def exported_file(tmp_path_factory, data) -> Path:
    """One real ANCRe + MoD proxy trial in a real store, exported with frozen coefficients."""
    tmp = tmp_path_factory.mktemp("store")
    with Store(f"sqlite:///{tmp}/r.db") as store:
        store.create_search(
            "s",
            requested_trials=1,
            budget={"trial_flops": 3e9},
            space={"fixed": {"batch_size": 4, "seq_len": 32}, "params": {}},
            settings={},
            optuna_study_name=None,
            code_version="test",
        )
        tid = store.start_trial("s", number=0, config={"residual": "ancre", "mod_rate": 0.25})
        result = run_trial(ARCH, 3e9, data, run=RunConfig(batch_size=4, eval_sequences=16, evals=2), width_probe=False)
        assert result.status == "completed", result.failure_reason
        store.finish_trial(tid, result)
        target = 3 * flops_per_token(ARCH).executed * TOKENS
        return export_configs(store, "s", tmp / "best", trial=0, target_flops=target, freeze_ancre=True)[0]


@pytest.fixture(scope="module")
def exported(exported_file) -> ExportedConfig:
    ex = load_exported(exported_file)
    assert ex.ancre.freeze and ex.mod_thresholds and ex.recommended.tokens == TOKENS
    # The proxy learned a sharp p (tau = 0.01): some coefficient is far from uniform, so freezing matters.
    assert max(abs(x - 0.5) for x in (ex.ancre.p[0][1], ex.ancre.p[1][1])) > 0.1
    return ex


class Spy:
    """Calls the real `train`, keeping its outcome and the router buffers right after `model_hook`."""

    def __init__(self):
        self.outcomes, self.after_hook = [], []

    def __call__(self, *args, model_hook=None, **kwargs):
        def hook(model):
            model_hook(model)
            self.after_hook.append(
                {
                    f"{kind}{j}": (float(r.threshold), float(r.eval_threshold))
                    for (kind, j), r in model.routers().items()
                }
            )

        outcome = train(*args, model_hook=hook, **kwargs)
        self.outcomes.append(outcome)
        return outcome


def run_pretrain(exported, out_dir, data, **kwargs):
    spy = Spy()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pretrain_module, "train", spy)
        summary = pretrain(exported, data=data, out_dir=out_dir, run_overrides={"checkpoint_every": 10}, **kwargs)
    return summary, spy


@pytest.fixture(scope="module")
def uninterrupted(exported, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    summary, spy = run_pretrain(exported, out, data)
    return out, summary, spy


# ---- budget ----------------------------------------------------------------------------------------


def test_budget_from_tokens_flops_or_recommendation(exported):
    executed = flops_per_token(exported.arch).executed
    assert budget_for(exported, tokens=1000) == 3 * executed * 1000
    assert budget_for(exported, target_flops=5e9) == 5e9
    assert budget_for(exported) == 3 * executed * TOKENS
    with pytest.raises(PretrainError, match="not both"):
        budget_for(exported, tokens=10, target_flops=1e9)
    with pytest.raises(PretrainError, match="--tokens"):
        budget_for(exported, tokens=0)
    with pytest.raises(PretrainError, match="--target-flops"):
        budget_for(exported, target_flops=math.inf)
    with pytest.raises(PretrainError, match="no budget"):
        budget_for(exported.model_copy(update={"recommended": None}))


def test_too_small_budget_or_bad_overrides_are_one_line_errors(exported, data, tmp_path):
    with pytest.raises(PretrainError, match="budget too small") as err:
        pretrain(exported, tokens=10, data=data, out_dir=tmp_path / "a")
    assert "\n" not in str(err.value)
    with pytest.raises(PretrainError, match="run.batch_size"):
        pretrain(exported, tokens=TOKENS, data=data, out_dir=tmp_path / "b", run_overrides={"batch_size": 0})
    with pytest.raises(PretrainError, match="checkpoint_dir"):
        pretrain(exported, tokens=TOKENS, data=data, out_dir=tmp_path / "c", run_overrides={"checkpoint_dir": "x"})
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# ---- what the export does to the model ---------------------------------------------------------------


@torch.no_grad()
def coefficients(model) -> list[list[float]]:
    return model.connectivity.matrix().double().tolist()


def assert_same_p(got: list[list[float]], want: list[list[float]]) -> None:
    """Equal up to float32 rounding of tau log p and of the softmax."""
    torch.testing.assert_close(
        torch.tensor(got, dtype=torch.float64), torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-6
    )


def test_frozen_logits_reproduce_p():
    p = [[1.0, 0.25, 0.0], [0.0, 0.75, 1e-20], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    c = frozen_logits(p, n_layers=3, tau=0.01)
    assert c.shape == (6,)
    for j, start in ((1, 0), (2, 1), (3, 3)):
        got = torch.softmax(c[start : start + j] / 0.01, 0)
        want = torch.tensor([max(p[i][j - 1], 1e-12) for i in range(j)], dtype=torch.float64)
        torch.testing.assert_close(got, want / want.sum(), rtol=1e-9, atol=1e-15)


def test_apply_export_freezes_ancre_and_loads_mod_thresholds(exported):
    model = build_model(exported.arch).train()
    apply_export(model, exported)
    assert not model.connectivity.logits.requires_grad
    assert_same_p(coefficients(model), exported.ancre.p)
    routers = {f"{k}{j}": r for (k, j), r in model.routers().items()}
    assert set(routers) == set(exported.mod_thresholds)
    for name, value in exported.mod_thresholds.items():
        assert float(routers[name].threshold) == pytest.approx(value, rel=1e-6)
        assert float(routers[name].eval_threshold) == pytest.approx(value, rel=1e-6)
    # A training step leaves the frozen logits without a gradient and unchanged.
    logits = model.connectivity.logits.clone()
    opt = torch.optim.AdamW(model.parameters(), lr=1.0)
    model(torch.randint(0, 256, (2, 32))).float().logsumexp(-1).mean().backward()
    opt.step()
    assert model.connectivity.logits.grad is None and torch.equal(model.connectivity.logits, logits)


def test_unfrozen_export_learns_connectivity_from_equal_logits(exported):
    model = build_model(exported.arch)
    learn = exported.model_copy(update={"ancre": exported.ancre.model_copy(update={"freeze": False})})
    model_hook(learn, torch.device("cpu"), Parallel())(model)
    assert model.connectivity.logits.requires_grad and torch.count_nonzero(model.connectivity.logits) == 0


# ---- end to end ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_pretrain_end_to_end_keeps_frozen_coefficients(uninterrupted, exported):
    out, summary, spy = uninterrupted
    assert summary["status"] == "completed" and math.isfinite(summary["val_loss"])
    assert summary["val_loss"] < math.log(256) and summary["resumed_from_step"] == 0
    per_step = 4 * exported.arch.seq_len
    assert abs(summary["tokens_seen"] - TOKENS) <= per_step / 2 and summary["tokens_seen"] % per_step == 0
    assert summary["training_flops"] == pytest.approx(summary["budget_flops"], rel=0.02)
    assert summary["precision"] == ("bf16" if torch.cuda.is_available() else "fp32")
    assert json.loads((out / "summary.json").read_text())["val_loss"] == summary["val_loss"]
    # The coefficients the model trained with are exactly the exported p, and never had a gradient.
    model = spy.outcomes[0].model
    logits = model.connectivity.logits
    assert not logits.requires_grad and logits.grad is None
    expected = frozen_logits(exported.ancre.p, exported.arch.n_layers, exported.arch.ancre_tau).float()
    assert torch.equal(logits.detach().cpu(), expected)
    assert_same_p(coefficients(model), exported.ancre.p)
    # MoD thresholds were loaded before training (training then moves them: a warm start).
    assert spy.after_hook[0] == {k: pytest.approx((v, v), rel=1e-6) for k, v in exported.mod_thresholds.items()}
    final = torch.load(out / "final.pt", weights_only=True)
    assert ArchConfig(**final["arch"]) == exported.arch
    assert torch.equal(final["model"]["connectivity.logits"], expected)


@pytest.mark.slow
def test_stopped_run_resumes_to_the_uninterrupted_result(uninterrupted, exported, data, tmp_path):
    full_out, full, full_spy = uninterrupted
    out = tmp_path / "resumed"
    stopped, _ = run_pretrain(exported, out, data, report=lambda point: point.step >= 50)
    assert stopped["status"] == "stopped" and stopped["steps"] == 50 and stopped["final_model"] is None
    points = []
    resumed, spy = run_pretrain(exported, out, data, report=points.append)
    assert resumed["status"] == "completed" and resumed["resumed_from_step"] == 50
    # Training really started from the step-50 checkpoint (a fresh run with the same seed would report
    # from its first steps), and reported exactly what the uninterrupted run reported after step 50.
    assert points and points[0].step > 50
    assert points == [p for p in full_spy.outcomes[0].state.curve if p.step > 50]
    assert resumed["val_loss"] == full["val_loss"] and resumed["tokens_seen"] == full["tokens_seen"]
    assert resumed["training_flops"] == full["training_flops"]
    a = torch.load(full_out / "final.pt", weights_only=True)["model"]
    b = torch.load(out / "final.pt", weights_only=True)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    again, spy_again = run_pretrain(exported, out, data)  # complete: nothing trains again
    assert again["already_complete"] and again["val_loss"] == full["val_loss"] and not spy_again.outcomes


@pytest.mark.slow
def test_out_dir_holding_another_run_is_refused(uninterrupted, exported, data):
    out, full, _ = uninterrupted
    with pytest.raises(PretrainError, match="different budget_flops") as err:
        pretrain(exported, tokens=2 * TOKENS, data=data, out_dir=out)
    assert "\n" not in str(err.value)
    with pytest.raises(PretrainError, match="different seed"):
        pretrain(exported, data=data, out_dir=out, seed=1)


def test_diverged_run_is_returned_not_raised(exported, data, tmp_path):
    absurd = exported.model_copy(
        update={"optim": exported.optim.model_copy(update={"lr": 1e6, "warmup": 0.0, "grad_clip": 1e9})}
    )
    summary = pretrain(absurd, tokens=TOKENS, data=data, out_dir=tmp_path)
    assert summary["status"] == "diverged" and summary["val_loss"] == math.inf
    assert "non-finite" in summary["failure_reason"] and summary["final_model"] is None
    stored = json.loads((tmp_path / "summary.json").read_text())  # strict JSON: inf is null
    assert stored["status"] == "diverged" and stored["val_loss"] is None
    assert not (tmp_path / "final.pt").exists()


# ---- data parallel: two real processes over gloo ----------------------------------------------------

WORKER = """
import json, os, sys
from workers.pretrain.export_format import load_exported
from workers.pretrain.run import pretrain
from workers.data.config import DataConfig
src, cache, out = sys.argv[1:]
summary = pretrain(load_exported(src), tokens=8000, data=DataConfig(cache_dir=cache), out_dir=out,
                   run_overrides={"checkpoint_every": 5})
print("SUMMARY", json.dumps(summary))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed with gloo")
def test_two_process_data_parallel_keeps_replicas_identical(exported_file, data, tmp_path):
    """The environment torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT), two CPU processes."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {
        **os.environ,
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
        "CUDA_VISIBLE_DEVICES": "",
    }
    out = tmp_path / "ddp"
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(exported_file), data.cache_dir, str(out)],
            cwd=ROOT,
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outputs = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=180)
            assert p.returncode == 0, stderr[-3000:]
            outputs.append(json.loads(stdout.split("SUMMARY ", 1)[1]))
    finally:
        for p in procs:  # only the processes this test started, by PID
            if p.poll() is None:
                p.kill()
                p.wait()
    first, second = outputs
    assert first["status"] == second["status"] == "completed" and first["world_size"] == 2
    assert first["val_loss"] == second["val_loss"] and first["tokens_seen"] == second["tokens_seen"]
    per_step = 2 * 4 * 32  # two ranks x batch 4 x seq_len 32
    assert first["tokens_seen"] == first["steps"] * per_step and abs(first["tokens_seen"] - 8000) <= per_step / 2
    a = torch.load(out / "last.pt", weights_only=True)
    b = torch.load(out / "rank1" / "last.pt", weights_only=True)
    assert a["state"]["step"] == b["state"]["step"] > 0
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])  # same update on every rank
    assert a["batches"]["n_windows"] == b["batches"]["n_windows"]  # each its own half of the stream
    with pytest.raises(PretrainError, match="world_size"):  # a single process cannot resume a 2-rank run
        pretrain(load_exported(exported_file), tokens=8000, data=data, out_dir=out)


# ---- the learning-rate schedule ---------------------------------------------------------------------


def test_pretraining_follows_the_exported_schedule_step_by_step(exported, uninterrupted):
    """The export carries the search's schedule (warmup-stable-decay by default) and the full-scale run follows
    it at every step it reports; an explicit override on the command line is said and recorded."""
    from test_schedules import expected_wsd

    _, _, spy = uninterrupted
    assert exported.optim.schedule == "wsd" and exported.optim.cooldown == 0.2
    outcome = spy.outcomes[-1]
    expected = expected_wsd(outcome.plan.steps, exported.optim)
    curve = outcome.state.curve
    assert curve and all(p.lr == pytest.approx(expected[p.step - 1], rel=1e-12) for p in curve)


def test_an_explicit_schedule_override_is_printed_and_recorded(exported_file, tmp_path):
    from typer.testing import CliRunner

    from nas.cli import app

    out = tmp_path / "run"
    done = CliRunner().invoke(
        app, ["pretrain", str(exported_file), "--tokens", "1024", "--out", str(out), "--schedule", "cosine"]
    )
    assert done.exit_code == 0, done.output
    assert "schedule override: schedule cosine (the search measured this config under schedule wsd)" in done.output
    manifest = json.loads((out / "pretrain.json").read_text())
    assert manifest["export"]["optim"]["schedule"] == "cosine"
    bad = CliRunner().invoke(app, ["pretrain", str(exported_file), "--out", str(tmp_path / "x"), "--cooldown", "2"])
    assert bad.exit_code == 2 and bad.output.strip().splitlines()[-1].startswith("error: --cooldown: must be <= 0.5")
    assert not (tmp_path / "x").exists()
