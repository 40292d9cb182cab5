"""benchmarks/claims/ancre_case_study.py: reading B's construction, and both readings in the outputs."""

import json

import pytest
import torch

from helpers import import_benchmark, run_script


@pytest.fixture(scope="module")
def cs():
    return import_benchmark("ancre_case_study")


def _one_hot_logits(depth: int, shortcuts: list[tuple[int, int]]) -> torch.Tensor:
    """Logits whose softmax at tau = 1e-3 is one-hot (exp(-1000) underflows to 0) on the given shortcuts."""
    logits = torch.zeros(depth + 1, depth + 1, dtype=torch.float64)
    for i, j in shortcuts:
        logits[i, j] = 1.0
    return logits


def _loss_and_grads(cs, weights, coeffs, inputs, target):
    weights = [w.detach().clone().requires_grad_() for w in weights]
    loss = cs.forward_loss(weights, coeffs, inputs, target, skip_zero=False)
    return loss, torch.autograd.grad(loss, weights)


def test_reading_b_has_no_shortcut_into_the_output_and_normalises_the_rest(cs):
    logits = torch.randn(5, 5, dtype=torch.float64)
    p_a, p_b = cs.ingoing_softmax(logits, 0.1), cs.ingoing_softmax(logits, 0.1, plain_last=True)
    assert torch.allclose(p_a.sum(0)[1:], torch.ones(4, dtype=torch.float64))
    assert torch.allclose(p_b.sum(0)[1:4], torch.ones(3, dtype=torch.float64)) and not p_b[:, 4].any()
    assert torch.equal(p_a[:, :4], p_b[:, :4]) and not torch.tril(p_b).any()  # nodes 1..K-1 mixed alike


def test_reading_b_at_the_0to2_corner_is_the_fixed_0to2_network_with_w1_shifted(cs):
    """p_02 = 1 gives W3 (W2 (W1 + I) + I) X: fixed 0:2 on (W1 + I, W2, W3), loss and gradients alike."""
    inputs, target = cs.make_problem()
    weights = [w.detach() for w in cs.init_weights(3)]
    p_b = cs.ingoing_softmax(_one_hot_logits(3, [(0, 2)]), 1e-3, plain_last=True)
    assert torch.equal(p_b, cs.fixed_coefficients(3, [(0, 1), (0, 2)]))
    loss_b, grads_b = _loss_and_grads(cs, weights, p_b, inputs, target)
    shifted = [weights[0] + torch.eye(cs.D, dtype=torch.float64), *weights[1:]]
    loss_02, grads_02 = _loss_and_grads(cs, shifted, cs.fixed_coefficients(3, [(0, 2)]), inputs, target)
    w1, w2, w3 = weights
    eye = torch.eye(cs.D, dtype=torch.float64)
    closed = 0.5 * (w3 @ (w2 @ (w1 + eye) + eye) @ inputs - target).pow(2).sum()
    assert torch.allclose(loss_b, loss_02, rtol=1e-12) and torch.allclose(loss_b, closed, rtol=1e-12)
    for g_b, g_02 in zip(grads_b, grads_02, strict=True):
        assert torch.allclose(g_b, g_02, rtol=1e-10, atol=1e-14)


def test_reading_b_at_the_1to2_corner_is_cascaded_without_the_output_shortcut(cs):
    """p_12 = 1 gives W3 (W2 + I)(W1 + I) X, while reading A's p_23 = 1 is the full cascaded network."""
    inputs, target = cs.make_problem()
    w1, w2, w3 = [w.detach() for w in cs.init_weights(3)]
    eye = torch.eye(cs.D, dtype=torch.float64)
    p_b = cs.ingoing_softmax(_one_hot_logits(3, [(1, 2)]), 1e-3, plain_last=True)
    closed = 0.5 * (w3 @ (w2 + eye) @ (w1 + eye) @ inputs - target).pow(2).sum()
    assert torch.allclose(cs.forward_loss([w1, w2, w3], p_b, inputs, target, skip_zero=False), closed, rtol=1e-12)
    p_a = cs.ingoing_softmax(_one_hot_logits(3, [(1, 2), (2, 3)]), 1e-3)
    cascaded = cs.fixed_coefficients(3, cs.FIXED_VARIANTS[3]["cascaded"])
    assert torch.equal(p_a, cascaded)


@pytest.mark.slow  # runs the script in a subprocess: 16 short GD runs
def test_case_study_writes_both_readings_side_by_side_with_a_verdict(tmp_path):
    run_script("-m", "benchmarks.claims.ancre_case_study", "--steps", "300", "--out-dir", str(tmp_path))
    result = json.loads((tmp_path / "ancre_case_study.json").read_text())
    assert (tmp_path / "ancre_case_study.png").stat().st_size > 30_000
    assert set(result["readings"]) == {"A", "B"}
    for reading, info in result["readings"].items():
        assert set(info["runs"]) == {"K=3", "K=4"} and isinstance(info["reproduces_fig2_3d"], bool)
        for depth_key, per_tau in info["runs"].items():
            depth = int(depth_key[2:])
            assert set(per_tau) == {"tau=0.01", "tau=0.1"}
            for tau_key, entry in per_tau.items():
                assert entry["convergence"] in {"linear", "sublinear"} and entry["final_loss"] > 0
                run = result["results"][depth_key][f"ANCRe{'' if reading == 'A' else '-B'}({tau_key})"]
                assert len(run["steps"]) == len(run["losses"]) > 10 and run["losses"][-1] < run["losses"][0]
                p = run["p_matrix"]
                columns = [sum(row[j] for row in p) for j in range(1, depth + 1)]
                receiving = columns[:-1] if reading == "B" else columns  # B: no shortcut into node K
                assert all(abs(c - 1) < 1e-9 for c in receiving)
                assert reading == "A" or columns[-1] == 0
                assert entry["p_into_output_node"]["0"] == p[0][depth]
    summary = result["summary"]
    assert set(summary["readings_reproduce"]) == {"A", "B"} and "Verdict:" in summary["verdict"]
    assert {"ANCRe(tau=0.01)", "ANCRe-B(tau=0.01)", "0:1", "0:2", "cascaded"} <= set(result["results"]["K=3"])
    assert set(summary["exponential_gap_reproduced"]) == {"K=3", "K=4"}
    runs = result["results"]["K=3"]
    assert runs["0:2"]["losses"][-1] < runs["0:2"]["losses"][0]
    p = runs["ANCRe(tau=0.01)"]["p_matrix"]  # ingoing coefficients into each node sum to one
    assert all(abs(sum(row[j] for row in p) - 1) < 1e-9 for j in range(1, len(p)))
