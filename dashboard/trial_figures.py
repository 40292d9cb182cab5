"""Figures of one trial's diagnostics, and the width certificate across trials.

`loss_curve_figure` draws the train and validation loss curves, `ancre_heatmap` ANCRe's learned coefficients
p_ij, `nag_figure` NAG's rotation per sublayer, `skip_rate_figure` the realised Mixture-of-Depths skip rates,
`residual_norm_figure` the residual stream's RMS by depth, and `width_figure` each trial's d_align and
p_hat(8, 8) against d_model (markers as `dashboard.style`). Pure functions of the store's curve points,
diagnostics and width dicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from nas.store import CurvePointRow
from workers.trial.result import WidthCertificate

from .style import family_colour, format_number, is_finite, legend_keys, mod_symbol, trial_hover

__all__ = [
    "ancre_heatmap",
    "loss_curve_figure",
    "nag_figure",
    "residual_norm_figure",
    "skip_rate_figure",
    "width_figure",
]


def loss_curve_figure(curve: Sequence[CurvePointRow]) -> go.Figure:
    """Train loss (line) and validation loss (markers where evaluated) against tokens seen."""
    use_tokens = all(p.tokens is not None for p in curve)
    hover = "step %{customdata[0]}<br>tokens %{customdata[1]:,}<br>training FLOPs %{customdata[2]:.3g}<br>"
    fig = go.Figure()
    for loss, name, mode in (
        (lambda p: p.train_loss, "train loss", "lines"),
        (lambda p: p.val_loss, "val loss", "lines+markers"),
    ):
        pts = [p for p in curve if is_finite(loss(p))]
        fig.add_trace(
            go.Scatter(
                x=[p.tokens if use_tokens else p.step for p in pts],
                y=[loss(p) for p in pts],
                name=name,
                mode=mode,
                customdata=[[p.step, p.tokens or 0, p.training_flops or 0] for p in pts],
                hovertemplate=hover + name + " %{y:.4f}<extra></extra>",
            )
        )
    fig.update_layout(
        title="Loss curve", xaxis_title="tokens seen" if use_tokens else "step", yaxis_title="loss (nats/token)"
    )
    return fig


def ancre_heatmap(p: Sequence[Sequence[float]]) -> go.Figure:
    """log10 of ANCRe's learned coefficients p_ij (as the ANCRe paper's Fig. 6).

    `p` is the stored (L+1) x L matrix with p[i][j-1] = p_ij (i = 0..L the source, 0 the
    embedding; j = 1..L the block it flows into). Drawn with "into j" down the rows and "from i"
    across, so the cells with i >= j, which do not exist, are the masked upper triangle (None).
    """
    p = np.array([[np.nan if v is None else v for v in row] for row in p], dtype=float)  # (L+1, L)
    n_from, n_into = p.shape
    z = [[None] * n_from for _ in range(n_into)]
    for j in range(1, n_into + 1):
        for i in range(min(j, n_from)):
            value = p[i, j - 1]
            z[j - 1][i] = float(np.log10(value)) if np.isfinite(value) and value > 0 else None
    finite = [v for row in z for v in row if v is not None]
    lo, hi = (min(finite), max(finite)) if finite else (-2.0, 0.0)
    ticks = list(range(math.floor(lo), math.ceil(hi) + 1))
    text = [[("" if v is None else f"{10**v:.3g}") for v in row] for row in z]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(n_from)),
            y=list(range(1, n_into + 1)),
            text=text,
            colorscale="Viridis",
            zmin=lo,
            zmax=hi if hi > lo else lo + 1,
            hoverongaps=False,
            colorbar=dict(title="p_ij", tickvals=ticks, ticktext=[f"1e{t}" for t in ticks]),
            hovertemplate="from %{x} into %{y}: p = %{text}<extra></extra>",
        )
    )
    fig.update_layout(
        title="ANCRe connectivity p_ij (log scale)",
        xaxis=dict(title="from i (0 = embedding)", dtick=1, constrain="domain"),
        yaxis=dict(title="into j", dtick=1, autorange="reversed", scaleanchor="x"),
    )
    return fig


def _sublayer_names(n: int) -> list[str]:
    """attn1, mlp1, attn2, ...: NAG's sublayers in order (attention then MLP of each block)."""
    return [f"{'attn' if k % 2 == 0 else 'mlp'}{k // 2 + 1}" for k in range(n)]


def nag_figure(diag: Mapping) -> go.Figure:
    """NAG per sublayer: the mean rotation angle theta (degrees) above, gate m and alpha below."""
    angle = diag.get("nag_angle") or []
    gate, alpha = diag.get("nag_gate") or [], diag.get("nag_alpha") or []
    names = _sublayer_names(max(len(angle), len(gate), len(alpha)))
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=("rotation angle θ = atan(|α m|)", "gate m and α"),
    )
    degrees = [None if not is_finite(a) else math.degrees(a) for a in angle]
    fig.add_trace(go.Bar(x=names[: len(degrees)], y=degrees, name="θ (degrees)", marker_color="#d62728"), row=1, col=1)
    fig.add_trace(go.Scatter(x=names[: len(gate)], y=gate, name="gate m", mode="lines+markers"), row=2, col=1)
    fig.add_trace(
        go.Scatter(x=names[: len(alpha)], y=alpha, name="α", mode="lines+markers", line=dict(dash="dash")), row=2, col=1
    )
    fig.update_yaxes(title_text="degrees", row=1, col=1)
    fig.update_yaxes(title_text="value", row=2, col=1)
    fig.update_xaxes(title_text="sublayer", row=2, col=1)
    fig.update_layout(title="NAG rotation per sublayer")
    return fig


def _sublayer_order(key: str) -> tuple[int, int]:
    kind = key.rstrip("0123456789")
    digits = key[len(kind) :]
    return (int(digits) if digits else 0, 0 if kind == "attn" else 1)


def skip_rate_figure(diag: Mapping, target: float | None = None) -> go.Figure:
    """Realised Mixture-of-Depths skip rate per routed sublayer, against the target `mod_rate`."""
    rates = diag.get("skip_rate") or {}
    keys = sorted(rates, key=_sublayer_order)
    fig = go.Figure(
        go.Bar(
            x=keys,
            y=[rates[k] for k in keys],
            name="realised skip rate",
            marker_color="#9467bd",
            hovertemplate="%{x}: %{y:.3f}<extra></extra>",
        )
    )
    if target is not None:
        fig.add_hline(y=target, line_dash="dash", annotation_text=f"target {target:g}")
    fig.update_layout(
        title="MoD skip rate per routed sublayer",
        xaxis_title="sublayer",
        yaxis=dict(title="share of tokens skipped", range=[0, 1]),
    )
    return fig


def residual_norm_figure(diag: Mapping) -> go.Figure:
    """RMS of the residual stream after the embedding (depth 0) and after each block."""
    rms = diag.get("residual_rms") or []
    depth = list(range(len(rms)))
    fig = go.Figure(
        go.Scatter(
            x=depth,
            y=rms,
            mode="lines+markers",
            name="residual RMS",
            hovertemplate="depth %{x}: RMS %{y:.4g}<extra></extra>",
        )
    )
    fig.update_layout(
        title="Residual stream RMS by depth", xaxis=dict(title="depth (0 = embedding)", dtick=1), yaxis_title="RMS"
    )
    return fig


# ---- width certificate -----------------------------------------------------------------------


def width_figure(rows_with_width: Sequence[tuple[Any, WidthCertificate]]) -> go.Figure:
    """d_align (left) and p_hat(8, 8) (right) against d_model, one point per trial.

    `rows_with_width` pairs each `TrialRow` with its width certificate (`Store.width`).
    """
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("effective alignment dimension d_align", "empirical misalignment p̂(8, 8)")
    )
    rows = [r for r, _ in rows_with_width]
    widths = [w for _, w in rows_with_width]
    for col, key in ((1, "d_align"), (2, "p_hat_8_8")):
        fig.add_trace(
            go.Scatter(
                x=[w.d_model for w in widths],
                y=[getattr(w, key) for w in widths],
                mode="markers",
                name=key,
                marker=dict(
                    color=[family_colour(r.residual) for r in rows],
                    symbol=[mod_symbol(r.mod_rate) for r in rows],
                    size=10,
                    line=dict(color="#222222", width=1),
                ),
                hovertext=[
                    trial_hover(r) + f"<br>{key} {format_number(getattr(w, key), '.4g')}" for r, w in rows_with_width
                ],
                hovertemplate="%{hovertext}<extra></extra>",
                showlegend=False,
            ),
            row=1,
            col=col,
        )
    for key in legend_keys(rows):
        fig.add_trace(key, row=1, col=1)
    fig.update_xaxes(type="log", title_text="d_model")
    fig.update_yaxes(title_text="d_align", type="log", row=1, col=1)
    fig.update_yaxes(title_text="p̂(8, 8)", row=1, col=2)
    fig.update_layout(title="Width certificate across trials")
    return fig
