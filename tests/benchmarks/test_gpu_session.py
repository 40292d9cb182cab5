"""benchmarks/speed/gpu_session.py in smoke mode on CPU: every stage answers, a failing stage stops none of the
others."""

import json
import math
import os

import pytest

from helpers import import_benchmark, run_script

STAGES = ["env", "kernel_ops", "kernel_steps", "mod_ratios", "proxy_trials"]
pytestmark = pytest.mark.slow  # trains tiny models and three proxy trials


@pytest.fixture(scope="module")
def gs():
    return import_benchmark("gpu_session")


def test_smoke_session_runs_every_stage_and_writes_its_json(tmp_path):
    """As CI runs it: a subprocess, Triton's interpreter for the kernel paths."""
    out = tmp_path / "gpu_session.json"
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    run_script("-m", "benchmarks.speed.gpu_session", "--smoke", "--out", str(out), env=env)
    record = json.loads(out.read_text())
    assert record["session"]["finished"] and record["session"]["smoke"]
    assert list(record["stages"]) == STAGES
    for name, stage in record["stages"].items():
        assert stage["status"] == "ok", (name, stage.get("reason"))
        assert stage["wall_s"] >= 0 and stage["estimate_s"] > 0
    env_, ops, steps, mod, trials = (record["stages"][n]["result"] for n in STAGES)
    assert env_["peaks"]["measured_matmul_flops_per_s"] > 0 and env_["triton_interpreter"]
    assert ops["paths"] == ["triton"] and all("forward_s" in row["triton"] for row in ops["ops"].values())
    assert "nag_mod0.25_triton_vs_reference_step_time" in steps["ratios"]
    assert set(mod["cascaded_mod_sweep"]) == {f"{r}{s}" for r in (0.125, 0.25, 0.5, 0.875) for s in ("", "_block")}
    assert all(v is not None for v in mod["ratios"].values()) and mod["targets_met"] is None
    for family in ("cascaded", "nag", "ancre"):
        trial = trials["trials"][family]
        assert trial["status"] == "completed", trial["failure_reason"]
        assert math.isfinite(trial["val_loss"]) and trial["tokens_per_s"] > 0 and trial["executed_flops_per_token"] > 0
        assert trial["share_of_peak"]["in_steps/measured_matmul_flops_per_s"] > 0


def test_a_failing_stage_is_recorded_and_the_next_one_still_runs(gs, tmp_path):
    """A real fault: an unknown trial flavour makes proxy_trials raise; mod_ratios, after it, still answers."""
    out = tmp_path / "s.json"
    gs.main(["--smoke", "--stages", "proxy_trials,mod_ratios", "--trial-flavour", "nope", "--out", str(out)])
    stages = json.loads(out.read_text())["stages"]
    assert stages["proxy_trials"]["status"] == "failed"
    assert stages["proxy_trials"]["reason"].startswith("ValueError: flavour: unknown name 'nope'")
    assert "Traceback" in stages["proxy_trials"]["traceback"]
    assert stages["mod_ratios"]["status"] == "ok" and stages["mod_ratios"]["result"]["ratios"]


def test_stages_that_no_longer_fit_the_budget_are_skipped_with_the_reason(gs, tmp_path):
    out = tmp_path / "s.json"
    record = gs.main(["--smoke", "--budget-s", "0.5", "--stages", "env,kernel_ops", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(record, default=str))
    for stage in record["stages"].values():
        assert stage["status"] == "skipped" and "of the budget left" in stage["reason"]
    assert record["session"]["finished"]


def test_the_full_session_refuses_a_cpu_and_unknown_stages(gs, tmp_path):
    with pytest.raises(SystemExit):
        gs.main(["--device", "cpu", "--out", str(tmp_path / "s.json")])
    with pytest.raises(SystemExit):
        gs.main(["--smoke", "--stages", "env,warp_drive", "--out", str(tmp_path / "s.json")])
    assert not (tmp_path / "s.json").exists()
