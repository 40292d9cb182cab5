"""Width certificate: the effective alignment dimension of a trained proxy (docs/design.md §4).

Source: Zhang et al., "Mechanisms of Width Scaling in Normalized Residual Networks: The
Effective Alignment Dimension", arXiv 2607.24887 (shared/papers/effective_alignment_dimension_*).
The stored text of the paper carries no equation numbers, so formulas are cited by the section
and statement they appear in:

* "Assumptions and Notation / Key Alignment Quantities": mu_M, g_K, the misalignment event
  {mu_M . g_K <= 0}, d_par = ||mu||^4 / mu^T Sigma mu, d_2 = ||mu||^4 / tr(Sigma^2),
  d_align = min(d_par, d_2), Xi_{M,K} and B_exact(M,K) = Xi / (1 + Xi), n_eff = MK / (M+K+1).
* "Main Theorems / Theorem 1": E[mu_M . g_K] = ||mu||^2,
  Var(mu_M . g_K) = (1/M + 1/K) mu^T Sigma mu + tr(Sigma^2) / (MK), and the chain of UPPER bounds
  P(mu_M . g_K <= 0) <= B_exact(M,K) <= B_align(M,K) = 1 / (1 + n_eff d_align).
* "Gradient-Misalignment Probability": p_hat_{M,K} = share of Monte Carlo trials with
  mu_M . g_K <= 0 (the paper reports M = K = 8 as its headline budget).
* "Direct Residual-Expansion Intervention": the signal of a token-shared bias z_t(b) = z_t + b is
  grad_b loss = sum_t grad_{z_t} loss, measured after the final block and before the final norm.

docs/design.md §4 and the paper agree on every formula used here (checked).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from .result import WidthCertificate

if TYPE_CHECKING:
    from search_spaces.residual_lm.base import ResidualLM

__all__ = [
    "alignment_statistics",
    "b_align",
    "b_exact",
    "empirical_misalignment",
    "sequence_gradients",
    "width_certificate",
]


def sequence_gradients(model: ResidualLM, idx: Tensor, targets: Tensor) -> Tensor:
    """Per-sequence activation gradients q_r = sum_t d loss_r / d z_{r,t}: (R, d), in the dtype of z.

    z = model.hidden(idx): (R, T, d) is the final residual stream (before the final norm) and
    logits = model.head(z). loss_r = (1/T) sum_t CE(logits[r, t], targets[r, t]) is the MEAN
    next-token cross-entropy of sequence r (targets are already the next tokens, (R, T)).
    q_r is the gradient of loss_r w.r.t. a bias b_r added to every token of sequence r
    (z_{r,t} + b_r), since d loss_r / d b_r = sum_t d loss_r / d z_{r,t} (chain rule).

    One backward pass suffices: model.head acts token-wise (final norm + unembedding), so
    loss_r depends on z only through z[r]. Hence d(sum_s loss_s)/d z[r] = d loss_r / d z[r]
    exactly, and summing that gradient over t gives q_r. The trunk runs without autograd;
    only the head is differentiated (z is detached into a leaf). Eval mode is the caller's job.
    """
    with torch.no_grad():
        z = model.hidden(idx)
    with torch.enable_grad():
        z = z.detach().requires_grad_(True)
        logits = model.head(z)
        r, t, v = logits.shape
        ce = F.cross_entropy(logits.reshape(r * t, v).float(), targets.reshape(r * t), reduction="none")
        total = ce.view(r, t).mean(dim=1).sum()  # sum_r loss_r
        (grad_z,) = torch.autograd.grad(total, z)
    return grad_z.sum(dim=1).detach()


def _ratio(num: float, den: float) -> float:
    """num / den with the limits this module needs: x/0 = inf for x > 0, 0/0 = nan."""
    if math.isnan(num) or math.isnan(den):
        return math.nan
    if den == 0.0:
        return math.inf if num > 0.0 else math.nan
    return num / den


def _second_moments(q: Tensor, mu: Tensor) -> tuple[float, float]:
    """(mu^T Sigma mu, tr(Sigma^2)) of the unbiased sample covariance, without a d x d matrix.

    With Qc = q - mean (R x d) and Sigma = Qc^T Qc / (R-1):
      mu^T Sigma mu = ||Qc mu||^2 / (R-1),
      tr(Sigma^2)   = tr(Qc^T Qc Qc^T Qc) / (R-1)^2 = ||Qc Qc^T||_F^2 / (R-1)^2  (R x R Gram).
    Cost O(R^2 d) instead of O(R d^2).
    """
    n = q.shape[0]
    qc = q - q.mean(dim=0)
    mu_sigma_mu = float((qc @ mu).pow(2).sum()) / (n - 1)
    gram = qc @ qc.T
    tr_sigma2 = float(gram.pow(2).sum()) / (n - 1) ** 2
    return mu_sigma_mu, tr_sigma2


def _dimensions(mu_sq: float, mu_sigma_mu: float, tr_sigma2: float) -> tuple[float, float]:
    """(d_par, d_2) = (||mu||^4 / mu^T Sigma mu, ||mu||^4 / tr(Sigma^2)) with their limits.

    mu = 0 with Sigma != 0 is "no signal": both are 0 (d_par -> ||mu||^2 / lambda as mu -> 0,
    although mu^T Sigma mu = 0 there). Zero variance with mu != 0 gives inf; all zero gives nan.
    """
    if mu_sq == 0.0 and tr_sigma2 > 0.0:
        return 0.0, 0.0
    return _ratio(mu_sq**2, mu_sigma_mu), _ratio(mu_sq**2, tr_sigma2)


def alignment_statistics(q: Tensor) -> dict:
    """Plug-in signal/noise geometry of R samples q: (R, d), computed in float64.

    mu = mean_r q_r, Sigma = unbiased sample covariance, and (paper, Key Alignment Quantities)
      d_par = ||mu||^4 / (mu^T Sigma mu),  d_2 = ||mu||^4 / tr(Sigma^2),  d_align = min(d_par, d_2).
    Degenerate cases never raise: R < 2 leaves Sigma undefined (nan); zero variance with mu != 0
    gives inf; mu = 0 gives 0 (nan if the variance is zero too).
    Note: plug-in estimates are biased; for Gaussian q, E tr(S^2) = R/(R-1) tr(Sigma^2)
    + tr(Sigma)^2/(R-1), so d_2 is underestimated unless R >> tr(Sigma)^2 / tr(Sigma^2).
    """
    q = q.detach().to(torch.float64)
    n, d = q.shape
    mu = q.mean(dim=0) if n > 0 else torch.full((d,), math.nan, dtype=torch.float64)
    mu_sq = float(mu @ mu)
    if n >= 2:
        mu_sigma_mu, tr_sigma2 = _second_moments(q, mu)
    else:
        mu_sigma_mu, tr_sigma2 = math.nan, math.nan
    d_par, d_2 = _dimensions(mu_sq, mu_sigma_mu, tr_sigma2)
    d_align = math.nan if math.isnan(d_par) or math.isnan(d_2) else min(d_par, d_2)
    return {
        "n_sequences": n,
        "d_model": d,
        "mu_norm": math.sqrt(mu_sq) if not math.isnan(mu_sq) else math.nan,
        "mu_sigma_mu": mu_sigma_mu,
        "tr_sigma2": tr_sigma2,
        "d_par": d_par,
        "d_2": d_2,
        "d_align": d_align,
    }


def b_exact(d_par: float, d_2: float, m: int, k: int) -> float:
    """Exact second-moment certificate B_exact(M,K) = Xi / (1 + Xi) (paper, Theorem 1).

    Xi_{M,K} = 1/(M d_par) + 1/(K d_par) + 1/(M K d_2) = Var(mu_M . g_K) / E[mu_M . g_K]^2, and
    Theorem 1 (one-sided Chebyshev/Cantelli) gives P(mu_M . g_K <= 0) <= B_exact: an UPPER bound
    on the misalignment probability. d = inf contributes 0 to Xi; d = 0 makes Xi = inf, B = 1.
    """
    if m < 1 or k < 1:
        raise ValueError(f"b_exact: need m, k >= 1, got m={m}, k={k}")
    xi = _ratio(1.0, m * d_par) + _ratio(1.0, k * d_par) + _ratio(1.0, m * k * d_2)
    if math.isnan(xi):
        return math.nan
    return 1.0 if math.isinf(xi) else xi / (1.0 + xi)


def b_align(d_align: float, m: int, k: int) -> float:
    """Simplified certificate B_align(M,K) = 1 / (1 + n_eff d_align), n_eff = MK/(M+K+1).

    Paper, Theorem 1: P(mu_M . g_K <= 0) <= B_exact(M,K) <= B_align(M,K) (an UPPER bound, looser
    than B_exact because both relative-noise terms are replaced by their worst case d_align).
    """
    if m < 1 or k < 1:
        raise ValueError(f"b_align: need m, k >= 1, got m={m}, k={k}")
    n_eff = m * k / (m + k + 1)
    return 1.0 / (1.0 + n_eff * d_align)


def _disjoint_subsets(n: int, m: int, k: int, draws: int, seed: int) -> tuple[Tensor, Tensor]:
    """Indices (draws, m) and (draws, k) of disjoint random subsets of range(n), seeded.

    Each row is the head of an independent uniform random permutation: the indices of the
    m + k largest of n i.i.d. uniform keys, in decreasing key order (topk, O(n) per row rather
    than a full argsort). The M-set and the K-set of a draw therefore never share a sample.
    """
    gen = torch.Generator().manual_seed(seed)
    keys = torch.rand(draws, n, generator=gen, dtype=torch.float64)
    head = keys.topk(m + k, dim=1, sorted=True).indices
    return head[:, :m], head[:, m:]


def _subset_dots(gram: Tensor, idx_m: Tensor, idx_k: Tensor) -> Tensor:
    """mu_M . g_K per draw from the Gram matrix G = q q^T: (1/(MK)) sum_{i in M, j in K} G_ij."""
    m, k = idx_m.shape[1], idx_k.shape[1]
    return gram[idx_m[:, :, None], idx_k[:, None, :]].sum(dim=(1, 2)) / (m * k)


def empirical_misalignment(q: Tensor, m: int = 8, k: int = 8, draws: int = 2000, seed: int = 0) -> float:
    """p_hat(M,K) = share of draws with mu_M . g_K <= 0 (paper, Gradient-Misalignment Probability).

    Per draw, M samples of q (R, d) are averaged into mu_M and K OTHER samples into g_K (disjoint
    subsets, without replacement). Vectorised over draws through the R x R Gram matrix, float64,
    deterministic under `seed`. Returns nan when R < m + k or draws < 1.
    """
    n = q.shape[0]
    if m < 1 or k < 1 or draws < 1 or n < m + k:
        return math.nan
    q = q.detach().to(torch.float64)
    idx_m, idx_k = _disjoint_subsets(n, m, k, draws, seed)
    dots = _subset_dots(q @ q.T, idx_m, idx_k)
    return float((dots <= 0).double().mean())


def width_certificate(
    model: ResidualLM, idx: Tensor, targets: Tensor, draws: int = 2000, seed: int = 0
) -> WidthCertificate:
    """q_r per sequence of (idx, targets) -> d_align, B_exact(8,8), B_align(8,8), p_hat(8,8).

    The certificates are evaluated at the plug-in estimates of d_par, d_2 (as in the paper's
    experiments, "computed from the estimated activation-gradient moments").
    """
    q = sequence_gradients(model, idx, targets)
    s = alignment_statistics(q)
    return WidthCertificate(
        n_sequences=s["n_sequences"],
        d_model=s["d_model"],
        mu_norm=s["mu_norm"],
        d_par=s["d_par"],
        d_2=s["d_2"],
        d_align=s["d_align"],
        b_exact_8_8=b_exact(s["d_par"], s["d_2"], 8, 8),
        b_align_8_8=b_align(s["d_align"], 8, 8),
        p_hat_8_8=empirical_misalignment(q, 8, 8, draws=draws, seed=seed),
    )
