"""The width certificate (docs/design.md §4, effective alignment dimension paper) computes what it claims."""

from __future__ import annotations

import math
from dataclasses import asdict

import pytest
import torch
import torch.nn.functional as F

from helpers import FAMILIES, small_cfg, tokens
from search_spaces.residual_lm import build_model
from workers.trial.result import WidthCertificate
from workers.trial.width_probe import (
    _disjoint_subsets,
    alignment_statistics,
    b_align,
    b_exact,
    empirical_misalignment,
    sequence_gradients,
    width_certificate,
)

D = 64
SPECTRUM = 1.0 / (1.0 + torch.arange(D, dtype=torch.float64) / 8)  # diagonal Sigma


def _mean(norm: float, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    mu = torch.randn(D, generator=gen, dtype=torch.float64)
    return mu / mu.norm() * norm


def _true_dims(mu: torch.Tensor, lam: torch.Tensor) -> tuple[float, float]:
    """Closed-form d_par, d_2 for Sigma = diag(lam)."""
    m4 = float(mu @ mu) ** 2
    return m4 / float((mu**2 * lam).sum()), m4 / float((lam**2).sum())


def _gaussian(mu: torch.Tensor, lam: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return mu + torch.randn(n, mu.numel(), generator=gen, dtype=torch.float64) * lam.sqrt()


# ---------------------------------------------------------------- estimators


def test_gram_path_equals_direct_covariance():
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(10, 6, generator=gen, dtype=torch.float64) * 2 + 0.7
    s = alignment_statistics(q)
    mu = q.mean(0)
    sigma = torch.cov(q.T)  # unbiased, d x d
    mu_sigma_mu, tr_sigma2 = float(mu @ sigma @ mu), float(torch.trace(sigma @ sigma))
    assert s["mu_sigma_mu"] == pytest.approx(mu_sigma_mu, rel=1e-10)
    assert s["tr_sigma2"] == pytest.approx(tr_sigma2, rel=1e-10)
    m4 = float(mu @ mu) ** 2
    assert s["d_par"] == pytest.approx(m4 / mu_sigma_mu, rel=1e-10)
    assert s["d_2"] == pytest.approx(m4 / tr_sigma2, rel=1e-10)
    assert s["d_align"] == min(s["d_par"], s["d_2"])
    assert s["mu_norm"] == pytest.approx(float(mu.norm()), rel=1e-12)


@pytest.mark.parametrize("norm", [2.0, 4.0])
def test_estimators_recover_closed_form_dimensions(norm):
    mu = _mean(norm)
    d_par, d_2 = _true_dims(mu, SPECTRUM)
    s = alignment_statistics(_gaussian(mu, SPECTRUM, 4000, seed=11))
    assert s["d_par"] == pytest.approx(d_par, rel=0.05)
    assert s["d_2"] == pytest.approx(d_2, rel=0.05)
    assert s["d_align"] == pytest.approx(min(d_par, d_2), rel=0.05)
    assert s["mu_sigma_mu"] == pytest.approx(float((mu**2 * SPECTRUM).sum()), rel=0.05)
    assert s["tr_sigma2"] == pytest.approx(float((SPECTRUM**2).sum()), rel=0.05)


def test_estimators_accept_float32_and_d_larger_than_r():
    q = _gaussian(_mean(3.0), SPECTRUM, 20, seed=2).float()  # R = 20 < d = 64
    s = alignment_statistics(q)
    ref = alignment_statistics(q.double())
    assert s == ref  # bit-equal only if float32 input is promoted before any arithmetic (float32 sums differ)
    assert all(isinstance(s[key], float) for key in ("mu_norm", "d_par", "d_2", "d_align"))


def test_degenerate_inputs_do_not_raise():
    one = alignment_statistics(torch.ones(1, 5))  # R = 1: covariance undefined
    assert one["n_sequences"] == 1 and math.isnan(one["d_align"]) and one["mu_norm"] == pytest.approx(math.sqrt(5))
    const = alignment_statistics(torch.ones(7, 5))  # zero variance, mu != 0
    assert const["d_par"] == math.inf and const["d_2"] == math.inf and const["d_align"] == math.inf
    assert b_exact(const["d_par"], const["d_2"], 8, 8) == 0.0 and b_align(const["d_align"], 8, 8) == 0.0
    zero = alignment_statistics(torch.zeros(7, 5))
    assert math.isnan(zero["d_align"])
    assert math.isnan(alignment_statistics(torch.zeros(0, 5))["d_align"])
    centred = alignment_statistics(torch.tensor([[1.0, 0.0], [-1.0, 0.0]]))  # mu = 0, Sigma != 0
    assert centred["d_par"] == 0.0 and centred["d_2"] == 0.0
    assert b_exact(0.0, 0.0, 8, 8) == 1.0 and b_align(0.0, 8, 8) == 1.0
    assert math.isnan(empirical_misalignment(torch.ones(15, 3), 8, 8))  # R < M + K


# ---------------------------------------------------------------- Theorem 1 and the certificates


def test_theorem1_mean_and_variance_by_monte_carlo():
    """E[mu_M.g_K] = ||mu||^2, Var = (1/M + 1/K) mu^T Sigma mu + tr(Sigma^2)/(MK), for skewed q."""
    d, m, k, trials = 8, 3, 5, 200_000
    gen = torch.Generator().manual_seed(5)
    mu = torch.randn(d, generator=gen, dtype=torch.float64) * 0.5
    a = torch.randn(d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
    sigma = a @ a.T  # q = mu + A (e - 1), e ~ Exp(1): mean mu, covariance A A^T, non-Gaussian

    def averages(n: int) -> torch.Tensor:
        e = torch.empty(trials, n, d, dtype=torch.float64).exponential_(1.0, generator=gen) - 1.0
        return mu + (e @ a.T).mean(dim=1)

    x = (averages(m) * averages(k)).sum(dim=1)
    mean = float(mu @ mu)
    var = (1 / m + 1 / k) * float(mu @ sigma @ mu) + float(torch.trace(sigma @ sigma)) / (m * k)
    se_mean = math.sqrt(var / trials)
    se_var = float(((x - x.mean()) ** 2).std()) / math.sqrt(trials)
    assert abs(float(x.mean()) - mean) < 4 * se_mean
    assert abs(float(x.var()) - var) < 4 * se_var
    assert abs(float(x.var()) / var - 1) < 0.03


def test_b_exact_and_b_align_formulas_and_order():
    d_par, d_2, m, k = 3.0, 0.5, 8, 4
    xi = 1 / (m * d_par) + 1 / (k * d_par) + 1 / (m * k * d_2)
    assert b_exact(d_par, d_2, m, k) == pytest.approx(xi / (1 + xi), rel=1e-14)
    assert b_align(0.5, m, k) == pytest.approx(1 / (1 + (m * k / (m + k + 1)) * 0.5), rel=1e-14)
    for d_par, d_2 in [(3.0, 0.5), (0.2, 7.0), (1.0, 1.0), (50.0, 0.01)]:
        for m, k in [(1, 1), (2, 8), (8, 8)]:
            assert b_exact(d_par, d_2, m, k) <= b_align(min(d_par, d_2), m, k) + 1e-15
    assert b_exact(2.0, 0.1, 16, 16) < b_exact(2.0, 0.1, 8, 8)  # more samples, smaller bound


@pytest.mark.parametrize(
    ("norm", "m", "k"), [(1.5, 1, 1), (1.0, 2, 2), (0.8, 4, 4), (0.6, 8, 8), (0.8, 8, 8), (0.7, 2, 8)]
)
def test_b_exact_bounds_empirical_misalignment(norm, m, k):
    """Theorem 1: p_hat <= B_exact, evaluated both at the TRUE (closed-form) d_par, d_2 and at the
    plug-in estimates from the same pool; misalignment chosen non-trivial (0.03 < p_hat < 0.45)."""
    mu = _mean(norm)
    q = _gaussian(mu, SPECTRUM, 2000, seed=7)
    p_hat = empirical_misalignment(q, m, k, draws=20_000, seed=0)
    assert 0.03 < p_hat < 0.45
    d_par, d_2 = _true_dims(mu, SPECTRUM)
    assert p_hat <= b_exact(d_par, d_2, m, k) <= b_align(min(d_par, d_2), m, k)
    s = alignment_statistics(q)
    assert p_hat <= b_exact(s["d_par"], s["d_2"], m, k)


# ---------------------------------------------------------------- empirical misalignment


def test_disjoint_subsets_are_disjoint_uniform_and_seeded():
    idx_m, idx_k = _disjoint_subsets(12, 3, 4, 5000, seed=1)
    both = torch.cat([idx_m, idx_k], dim=1)
    assert idx_m.shape == (5000, 3) and idx_k.shape == (5000, 4)
    assert all(len(set(row.tolist())) == 7 for row in both[:200])
    counts = torch.bincount(idx_m.flatten(), minlength=12).double() / (5000 * 3)
    assert float((counts - 1 / 12).abs().max()) < 0.01
    again = _disjoint_subsets(12, 3, 4, 5000, seed=1)
    assert torch.equal(again[0], idx_m) and torch.equal(again[1], idx_k)


def test_empirical_misalignment_matches_explicit_averages():
    q = _gaussian(_mean(0.5), SPECTRUM, 40, seed=4)
    idx_m, idx_k = _disjoint_subsets(40, 8, 8, 300, seed=9)
    dots = (q[idx_m].mean(dim=1) * q[idx_k].mean(dim=1)).sum(dim=1)
    expected = float((dots <= 0).double().mean())
    assert 0.0 < expected < 1.0
    assert empirical_misalignment(q, 8, 8, draws=300, seed=9) == expected
    assert empirical_misalignment(q.float(), 8, 8, draws=300, seed=9) == pytest.approx(expected, abs=1 / 300)


def test_empirical_misalignment_limits():
    assert empirical_misalignment(torch.ones(20, 3), 8, 8) == 0.0  # always aligned
    symmetric = _gaussian(torch.zeros(D, dtype=torch.float64), SPECTRUM, 400, seed=8)
    assert empirical_misalignment(symmetric, 4, 4, draws=4000, seed=0) == pytest.approx(0.5, abs=0.04)


# ---------------------------------------------------------------- on real models


def _model_and_batch(family: str, batch: int):
    cfg = small_cfg(residual=family)
    model = build_model(cfg).eval()
    idx = tokens(cfg, batch=batch, seed=21)
    targets = torch.roll(idx, shifts=-1, dims=1)
    return model, idx, targets


@pytest.mark.parametrize("family", FAMILIES)
def test_sequence_gradients_equal_per_sequence_autograd(family):
    model, idx, targets = _model_and_batch(family, batch=5)
    q = sequence_gradients(model, idx, targets)
    assert q.shape == (5, model.cfg.d_model)
    with torch.no_grad():
        z = model.hidden(idx)
    for r in range(idx.shape[0]):  # loss_r alone, its own backward
        z_r = z[r : r + 1].clone().requires_grad_(True)
        loss_r = F.cross_entropy(model.head(z_r)[0], targets[r])  # mean over the T positions
        loss_r.backward()
        assert torch.allclose(q[r], z_r.grad[0].sum(dim=0), rtol=1e-5, atol=1e-6)
    bias = torch.zeros(5, 1, model.cfg.d_model, requires_grad=True)  # token-shared bias per sequence
    logits = model.head(z + bias)
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none").mean(dim=1)
    losses.sum().backward()
    assert torch.allclose(q, bias.grad[:, 0], rtol=1e-5, atol=1e-6)
    assert float(q.norm()) > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_width_certificate_on_a_model(family):
    model, idx, targets = _model_and_batch(family, batch=24)
    cert = width_certificate(model, idx, targets, draws=500, seed=0)
    assert isinstance(cert, WidthCertificate)
    assert cert.n_sequences == 24 and cert.d_model == model.cfg.d_model
    assert math.isfinite(cert.d_align) and cert.d_align > 0
    assert cert.d_align == min(cert.d_par, cert.d_2) and cert.mu_norm > 0
    assert 0 < cert.b_exact_8_8 <= cert.b_align_8_8 <= 1
    assert 0 <= cert.p_hat_8_8 <= 1
    assert cert == width_certificate(model, idx, targets, draws=500, seed=0)  # deterministic
    d = asdict(cert)
    assert set(d) == {
        "n_sequences",
        "d_model",
        "mu_norm",
        "d_par",
        "d_2",
        "d_align",
        "b_exact_8_8",
        "b_align_8_8",
        "p_hat_8_8",
    }
    assert all(isinstance(v, (int, float)) for v in d.values())


def test_width_certificate_single_sequence_does_not_raise():
    model, idx, targets = _model_and_batch("cascaded", batch=1)
    cert = width_certificate(model, idx, targets)
    assert cert.n_sequences == 1
    assert math.isnan(cert.d_align) and math.isnan(cert.p_hat_8_8) and math.isnan(cert.b_exact_8_8)
