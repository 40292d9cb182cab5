"""The benchmark scripts stay runnable: tiny settings, real outputs with the documented fields."""

import csv
import json
import math
import os

import pytest

from helpers import import_benchmark, run_script

pytestmark = pytest.mark.slow  # each runs a benchmark script in a subprocess


def test_cpu_throughput_writes_its_json(tmp_path):
    out = tmp_path / "cpu.json"
    quick = ["--rounds", "1", "--per-round", "1", "--warmup", "0"]
    run_script("-m", "benchmarks.speed.cpu_throughput", *quick, "--out", str(out))
    result = json.loads(out.read_text())
    assert {"reference_gpt", "reference_llama", "cascaded", "nag", "ancre", "nag_mod0.25_block"} <= set(
        result["models"]
    )
    assert result["matmul_peak"]["gflops"] > 0 and result["machine"]["cpu"]
    for row in result["models"].values():
        assert row["tokens_per_s"] > 0 and 0 < row["share_of_peak"] < 1.5
    assert set(result["targets_met"]) >= {"nag_vs_cascaded_step_time", "fp32_share_of_matmul_peak"}


def test_fidelity_benchmark_runs_every_path_in_smoke_mode(tmp_path):
    runs, replicas, out = tmp_path / "runs.csv", tmp_path / "replicas.csv", tmp_path / "fidelity.json"
    run_script("-m", "benchmarks.trust.fidelity", "build", "--smoke", "--runs", str(runs), timeout=600)
    run_script(
        "-m", "benchmarks.trust.fidelity", "build-replicas", "--smoke", "--replica-runs", str(replicas), timeout=600
    )
    run_script(
        "-m",
        "benchmarks.trust.fidelity",
        "report",
        "--runs",
        str(runs),
        "--replica-runs",
        str(replicas),
        "--out",
        str(out),
    )
    result = json.loads(out.read_text())
    fidelity = import_benchmark("fidelity")
    plays = result["corpora"]["plays"]
    assert plays["configs"] == 3 and plays["truth"]["seeds_per_config"] == 2
    layouts = set(plays["replica_ladder"]["layouts"])  # those the replica table's shares can replay (T/10: one)
    assert fidelity.DEFAULT_LAYOUT in layouts and layouts <= set(fidelity.LAYOUTS)
    default = plays["replica_ladder"]["layouts"][fidelity.DEFAULT_LAYOUT]
    answer = default["table_order"]
    assert {"kendall_tau", "regret_in_seed_noise", "true_best_in_predicted_top3", "hypervolume_ratio_nadir"} <= set(
        answer
    )
    assert (
        answer["regret_nats"] >= 0
        and 0 < answer["compute_share"]
        and answer["predictor"] in ("top rung", "weighted fit")
    )
    assert default["rung_flops"] == pytest.approx(
        fidelity.layout_budgets(plays["target_flops"], *fidelity.LAYOUTS[fidelity.DEFAULT_LAYOUT])
    )
    assert (
        "without_the_bias_correction" in default
        and plays["budget_ladder"]["as_a_search_runs_it"]["table_order"]["compute_share"] > 0
    )
    assert result["summary"]["headline"]["plays"]["kendall_tau"] == answer["kendall_tau"]
    assert result["machine"]["cpu"] and out.with_suffix(".png").stat().st_size > 10_000


def test_replica_wall_benchmark_times_both_ladders_and_the_width_floors(tmp_path):
    out = tmp_path / "wall.json"
    run_script("-m", "benchmarks.trust.replica_wall", "--smoke", "--min-widths", "8,32", "--out", str(out), timeout=600)
    result = json.loads(out.read_text())
    variants = result["per_config"][0]["variants"]
    assert set(variants) == {"budget", "replica_min_width_8", "replica_min_width_32"}
    assert all(v["status"] == "completed" and len(v["rungs"]) == result["rungs"] for v in variants.values())
    assert [r["d_model"] for r in variants["replica_min_width_32"]["rungs"]] == [32] * 3  # the smoke config's own width
    assert variants["replica_min_width_8"]["steps"] > variants["budget"]["steps"]  # narrower: more tokens per FLOP
    summary = result["summary"]
    assert summary["flops_over_budget_ladder"]["replica_min_width_8"] > 1  # each rung its own run: no shared prefix
    assert set(result["step_ms_by_width"]) == {"8", "16"} and result["machine"]["cpu"]


def test_a_fidelity_build_resumes_with_only_the_jobs_its_table_lacks(tmp_path):
    fidelity_tables = import_benchmark("fidelity_tables")
    runs = tmp_path / "runs.csv"
    everything = fidelity_tables.pending_jobs(runs, fidelity_tables.jobs(smoke=True))  # no table yet: every job
    assert everything == fidelity_tables.jobs(smoke=True)
    done = [everything[0], next(j for j in everything if j.kind != everything[0].kind)]
    with runs.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fidelity_tables.COLUMNS)
        writer.writeheader()
        for job in done:  # one row per job is enough to mark it done
            row = dict.fromkeys(fidelity_tables.COLUMNS, 0)
            writer.writerow({**row, "config": job.config, "kind": job.kind, "seed": job.seed, "residual": "nag"})
    assert fidelity_tables.pending_jobs(runs, fidelity_tables.jobs(smoke=True)) == [
        j for j in everything if j not in done
    ]


def test_gpu_kernel_benchmark_runs_every_path_in_smoke_mode(tmp_path):
    """On CPU the Triton kernels run in the interpreter: each op's three paths and every family step."""
    out = tmp_path / "gpu.json"
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    run_script("-m", "benchmarks.speed.gpu_kernels", "--smoke", "--out", str(out), env=env)
    result = json.loads(out.read_text())
    assert result["machine"]["triton_interpreter"] and result["targets_met"] is None
    assert {"nag_epilogue/fp32", "nag_epilogue/bf16", "add_rmsnorm/fp32", "ancre_mix_j3/fp32"} <= set(result["ops"])
    for name, row in result["ops"].items():
        for path in ("triton", "eager"):
            assert row[path]["forward_s"] > 0 and row[path]["forward_backward_s"] > 0, (name, path)
        assert row["min_forward_bytes"] > 0 and row["triton_speedup_vs_eager"]["forward_s"] > 0
    assert len(result["steps"]) == 12 and all("median_step_s" in r for r in result["steps"].values())
    assert {"nag_vs_cascaded_step_time/triton", "ancre_mod0.25_vs_dense_step_time/reference"} <= set(result["ratios"])
    assert 0 < result["reference_overhead"]["nag"]["share_of_step"]


def test_store_load_benchmark_counts_every_trial_exactly_once(tmp_path, _postgres_admin_url):
    """A small run of the load benchmark on the test PostgreSQL server: exact integrity counts."""
    out = tmp_path / "load.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = ["--trials", "16", "--concurrency", "2", "--admin-url", _postgres_admin_url, "--out", str(out)]
    run_script("-m", "benchmarks.service.store_load", *args, env=env)
    result = json.loads(out.read_text())
    integrity = result["integrity"]
    assert integrity["store_rows"] == integrity["distinct_trial_numbers"] == integrity["optuna_complete"] == 16
    assert integrity["no_trial_lost_or_duplicated"] and result["machine"]
    assert 0 < result["all_writes"]["median"] <= result["all_writes"]["p99"] and result["trials_per_s"] > 0


def test_mod_published_benchmark_runs_every_path_in_smoke_mode(tmp_path):
    out = tmp_path / "mod.json"
    run_script("-m", "benchmarks.claims.mod_published", "--smoke", "--out", str(out), timeout=600)
    result = json.loads(out.read_text())
    assert len(result["runs"]) == 3 * 4 * 2 and out.with_suffix(".png").stat().st_size > 10_000
    assert set(result["summary"]) == {"cascaded", "nag", "ancre"}
    for s in result["summary"].values():
        assert s["gap_to_dense"]["dense"] == 0.0 and s["verdict"]
        assert s["realised_skip_rate"]["dense"] == 0.0 < s["realised_skip_rate"]["block_0.875"]
        assert set(s["causal_decision"]["val_loss"]) == {"threshold", "predictor"}
    runs = {(r["family"], r["setting"]): r for r in result["runs"] if r["seed"] == 0}
    for family in ("cascaded", "nag", "ancre"):  # iso-FLOP: fewer executed FLOPs per token buy more tokens
        dense, paper = runs[(family, "dense")], runs[(family, "block_0.875")]
        assert paper["executed_flops_per_token"] < dense["executed_flops_per_token"]
        assert paper["tokens_seen"] > dense["tokens_seen"]


def test_compile_benchmark_reports_its_break_even(tmp_path):
    out = tmp_path / "compile.json"
    run_script("-m", "benchmarks.speed.compile_cpu", "--smoke", "--rounds", "1", "--per-round", "1", "--out", str(out))
    result = json.loads(out.read_text())
    (row,) = result["families"].values()
    assert row["compile_s"] > 0 and row["eager_step_s"] > 0 and row["compiled_step_s"] > 0
    assert row["compiled_vs_eager"] == pytest.approx(row["compiled_step_s"] / row["eager_step_s"])
    assert result["verdict"]


def test_transfer_benchmark_runs_every_path_in_smoke_mode(tmp_path):
    """Build tiny tables (both parametrizations, both sweeps, the horizon check, the rule's), then report."""
    runs, out = tmp_path / "transfer.csv", tmp_path / "transfer.json"
    run_script("-m", "benchmarks.claims.transfer", "build", "--smoke", "--runs", str(runs), timeout=600)
    run_script("-m", "benchmarks.claims.transfer", "report", "--runs", str(runs), "--out", str(out))
    result = json.loads(out.read_text())
    assert result["rows"] == 3 * 2 * 4 * 2  # families x parametrizations x shapes x rates
    for family in ("cascaded", "nag", "ancre"):
        for par in ("standard", "completep"):
            s = result["summary"][family][par]
            assert s["width_drift"] >= 1 and s["depth_drift"] >= 1 and s["max_loss_given_up_at_base_lr"] >= 0
        # at the base shape both parametrizations are the same model: identical losses at every rate
        base = "d{}_L{}".format(*result["summary"]["base_shape"])
        assert result["summary"][family]["standard"]["loss_at_best_lr"][base] == pytest.approx(
            result["summary"][family]["completep"]["loss_at_best_lr"][base], abs=1e-6
        )
    assert out.with_suffix(".png").stat().st_size > 10_000
    for family in ("cascaded", "nag", "ancre"):  # the horizon rule: a family whose beta is 0 reads completep's rows
        assert set(result["summary"][family]) == {"standard", "completep", "completep_horizon"}
    horizon = result["horizon_check"]  # the base shape at two horizons: every family, and NAG uncapped
    assert set(horizon) == {"cascaded", "nag", "ancre", "nag_gates_uncapped"}
    for entry in horizon.values():
        assert len(entry["best_lr"]) == 2 and math.isfinite(entry["beta"])
        assert set(entry["horizon_drift"]) == {"width", "depth"} and min(entry["horizon_drift"].values()) >= 1


def test_the_horizon_check_recovers_a_known_exponent():
    """Rows whose loss is a parabola in log lr around lr* = 0.1 steps^-0.6 (NAG) and a flat 0.01 (cascaded)."""
    transfer = import_benchmark("transfer")
    rows = []
    for family, beta, scale in (("nag", 0.6, 0.1), ("cascaded", 0.0, 0.01)):
        for steps in (100, 400, 1600):
            best = scale * steps**-beta
            for lr in transfer.RATES:
                loss = 2.0 + (math.log(lr) - math.log(best)) ** 2
                rows.append(dict(family=family, parametrization="standard", steps=steps, lr=lr, val_loss=loss))
    result = transfer.horizon_check(rows, {"width": [100, 1600], "depth": [400, 800]})
    assert set(result) == {"nag", "cascaded"}  # no uncapped-gate rows, no entry
    assert result["nag"]["beta"] == pytest.approx(0.6, abs=1e-6)
    assert result["cascaded"]["beta"] == pytest.approx(0.0, abs=1e-6)
    assert result["nag"]["horizon_drift"]["width"] == pytest.approx(16**0.6)
    assert result["nag"]["horizon_drift"]["depth"] == pytest.approx(2**0.6)


def test_the_horizon_rule_takes_only_exponents_the_check_can_see_and_runs_the_sweep_under_them():
    """beta 0.6 over a 16x span of horizons moves the best rate 5.3x: kept; beta 0.1 moves it 1.3x, less than
    the rate grid's 2x step: 0. The rule's jobs are then that family's completep sweep, every shape and rate,
    with the base shape's token count as the horizon."""
    transfer = import_benchmark("transfer")
    horizon_rows = []
    for family, beta in (("nag", 0.6), ("cascaded", 0.1), ("ancre", 0.0)):
        for steps in (100, 400, 1600):
            best = 0.1 * steps**-beta
            horizon_rows += [
                dict(family=family, parametrization="standard", steps=steps, lr=lr,
                     val_loss=2.0 + (math.log(lr) - math.log(best)) ** 2)
                for lr in transfer.RATES
            ]  # fmt: skip
    assert transfer.rule_exponents(horizon_rows) == {"nag": 0.6, "cascaded": 0.0, "ancre": 0.0}
    shapes = [(64, 4, 1000), (128, 4, 300), (64, 8, 500)]
    sweep = [dict(family=f, parametrization="completep", d_model=d, n_layers=n, tokens_seen=t, lr=1e-3)
             for f in ("nag", "cascaded", "ancre") for d, n, t in shapes]  # fmt: skip
    jobs = transfer.horizon_rule_jobs(sweep, horizon_rows, (1e-3, 2e-3), 1e12)
    assert {j[0] for j in jobs} == {"nag"} and len(jobs) == 3 * 2
    assert {(j[2], j[3]) for j in jobs} == {(d, n) for d, n, _ in shapes}
    span = (100 * transfer.BATCH * transfer.SEQ_LEN, 1600 * transfer.BATCH * transfer.SEQ_LEN)  # the check's
    assert all(j[1] == "completep" and j[8] == (1000, 0.6, span) for j in jobs)  # base shape (64, 4): 1000 tokens


@pytest.mark.postgres
def test_soak_benchmark_survives_its_faults_with_nothing_lost_or_duplicated(tmp_path):
    """A small soak on its own PostgreSQL server: worker kills, a server restart, a driver SIGTERM, a resume."""
    out = tmp_path / "soak.json"
    run_script(
        "-m", "benchmarks.service.soak", "--trials", "12", "--trial-seconds", "0.5", "--out", str(out), timeout=900
    )
    result = json.loads(out.read_text())
    assert result["faults"]["first_driver_exit"] == 143 and result["faults"]["resumed_driver_exit"] == 0
    assert result["final"] == 12 and result["lost"] == 0 and result["duplicated"] == 0
    assert result["optuna_running_left"] == 0 and result["optuna_disagreements"] == 0


def test_memory_mapped_shards_keep_no_private_copy_per_process(tmp_path):
    """The tokenizer benchmark's memory part on a small shard: mapped readers share, array readers copy."""
    tokenizers = import_benchmark("tokenizers")
    result = tokenizers._memory(tmp_path, n_tokens=8_000_000)  # 16 MB
    mapped, private = result["memory_mapped"], result["private_array"]
    assert all(
        r["checksum"] == mapped["per_process"][0]["checksum"] for r in mapped["per_process"] + private["per_process"]
    )
    assert private["total_private_mib"] > 0.9 * tokenizers.PROCESSES * result["shard_mib"]
    assert mapped["total_private_mib"] < 0.1 * private["total_private_mib"]
    assert mapped["total_pss_mib"] < 0.5 * private["total_pss_mib"]
