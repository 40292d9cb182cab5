"""The benchmark scripts stay runnable: tiny settings, real outputs with the documented fields."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> None:
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True, timeout=300)


def test_cpu_throughput_writes_its_json(tmp_path):
    out = tmp_path / "cpu.json"
    _run("benchmarks/cpu_throughput.py", "--rounds", "1", "--per-round", "1", "--warmup", "0", "--out", str(out))
    result = json.loads(out.read_text())
    assert {"reference_gpt", "cascaded", "nag", "ancre", "nag_mod0.25"} <= set(result["models"])
    assert result["matmul_peak"]["gflops"] > 0 and result["machine"]["cpu"]
    for row in result["models"].values():
        assert row["tokens_per_s"] > 0 and 0 < row["share_of_peak"] < 1.5
    assert set(result["targets_met"]) >= {"nag_vs_cascaded_step_time", "fp32_share_of_matmul_peak"}


def test_ancre_case_study_writes_curves_and_plot(tmp_path):
    _run("benchmarks/ancre_case_study.py", "--steps", "300", "--out-dir", str(tmp_path))
    result = json.loads((tmp_path / "ancre_case_study.json").read_text())
    assert (tmp_path / "ancre_case_study.png").stat().st_size > 10_000
    assert set(result["summary"]["exponential_gap_reproduced"]) == {"K=3", "K=4"}
    runs = result["results"]["K=3"]
    assert {"0:1", "0:2", "ANCRe(tau=0.01)"} <= set(runs)
    assert runs["0:2"]["losses"][-1] < runs["0:2"]["losses"][0]
    p = runs["ANCRe(tau=0.01)"]["p_matrix"]  # ingoing coefficients into each node sum to one
    assert all(abs(sum(row[j] for row in p) - 1) < 1e-9 for j in range(1, len(p)))
