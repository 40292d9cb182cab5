"""Plotly figures and tables of store rows: pure functions, rows in, figure (or DataFrame) out.

Nothing here imports Streamlit or opens a store: every function takes the plain rows of
`nas.store` (`TrialRow`, curve points, diagnostics and width dicts) and returns a
`plotly.graph_objects.Figure` or a `pandas.DataFrame`, so each can be tested on hand-made rows.

Conventions shared by the Pareto and width plots: colour is the residual family
(`FAMILY_COLOURS`), marker symbol is the Mixture-of-Depths rate (`mod_symbol`), and each search
of an overlay gets its own outline colour and front line dash (`search_style`).

At the target budget T (`nas.fidelity`): `target_front_figure` draws each trial's predicted loss at T
with its 80% band beside the measured front of each rung, `rung_curve_figure` one trial's rungs and
fitted curve L = E + A C^-alpha up to T, and `fidelity_figure` the leave-one-out errors.

The fronts' x-axis is a `dashboard.cost.CostAxis`: counted executed FLOPs per token (the default, the
search's objective) or measured training-step seconds per token; the front is recomputed on the axis
drawn. `cost_ratio_figure` shows each config's measured over counted cost (study median 1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from nas.extrapolate import NONE, STUDY
from nas.fidelity import BAND_LEVEL, Prediction, at_target, front_at_target
from nas.pareto import (
    hypervolume,
    hypervolume_curve,
    is_front_candidate,
    pareto_rows,
    reference_point,
)
from nas.store import RungRow
from workers.status import PENDING, TrialStatus

from .cost import COUNTED, CostAxis, cost_ratios, seconds_per_token

__all__ = [
    "FAMILY_COLOURS",
    "MOD_SYMBOLS",
    "ancre_heatmap",
    "cost_ratio_figure",
    "family_colour",
    "fidelity_figure",
    "format_number",
    "hypervolume_figure",
    "loss_curve_figure",
    "mod_symbol",
    "nag_figure",
    "pareto_figure",
    "residual_norm_figure",
    "rung_curve_figure",
    "rung_means",
    "searches_frame",
    "skip_rate_figure",
    "target_front_figure",
    "target_frame",
    "trial_hover",
    "trial_lr",
    "trials_frame",
    "width_figure",
]

FAMILY_COLOURS = {"cascaded": "#1f77b4", "nag": "#d62728", "ancre": "#2ca02c"}
OTHER_COLOUR = "#7f7f7f"  # a family this dashboard does not know, or none recorded
# (upper edge of the MoD-rate bin, symbol, legend label): the shipped space samples 0, 1/8, 1/4, 1/2.
MOD_SYMBOLS = (
    (0.0, "circle", "0"),
    (0.15, "square", "(0, 0.15]"),
    (0.35, "diamond", "(0.15, 0.35]"),
    (0.6, "triangle-up", "(0.35, 0.6]"),
    (math.inf, "star", "> 0.6"),
)
SEARCH_LINE_COLOURS = ("#222222", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
SEARCH_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
# Ended without a loss that may sit on a front (inf or partial).
NOT_ON_FRONT = (
    TrialStatus.DIVERGED,
    TrialStatus.INFEASIBLE,
    TrialStatus.STOPPED,
    TrialStatus.FAILED,
    TrialStatus.INTERRUPTED,
)


# ---- shared encodings ------------------------------------------------------------------------


def family_colour(residual: str | None) -> str:
    return FAMILY_COLOURS.get(residual or "", OTHER_COLOUR)


def _mod_bin(rate: float | None) -> tuple[str, str]:
    rate = 0.0 if rate is None else float(rate)
    return next((symbol, label) for edge, symbol, label in MOD_SYMBOLS if rate <= edge)


def mod_symbol(rate: float | None) -> str:
    """Marker symbol of a MoD rate: circle for dense (0), then square, diamond, triangle, star."""
    return _mod_bin(rate)[0]


def search_style(index: int) -> tuple[str, str]:
    """(line colour, dash) of the `index`-th search of an overlay."""
    return SEARCH_LINE_COLOURS[index % len(SEARCH_LINE_COLOURS)], SEARCH_DASHES[index % len(SEARCH_DASHES)]


def _finite(x: Any) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def trial_lr(row) -> float | None:
    """The trial's learning rate: what ran (config["optim"]) or else what was sampled (flat config)."""
    optim = row.config.get("optim") if isinstance(row.config.get("optim"), dict) else {}
    lr = optim.get("lr", row.config.get("lr"))
    return float(lr) if _finite(lr) else None


def format_number(x: Any, spec: str) -> str:
    """`x` in `spec`, "-" for None and "inf"/"-inf" for an infinite float (hover texts, metrics)."""
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return "inf" if x > 0 else "-inf"
    return format(x, spec)


def _micro(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.3g} µs"


def trial_hover(row, search: str | None = None, ratio: float | None = None) -> str:
    """The hover text of a trial: its config, losses, FLOPs, measured step time per token (and `ratio`, its
    measured over counted cost against the study's median, when given), tokens and number."""
    head = f"<b>{search} · trial #{row.number}</b>" if search else f"<b>trial #{row.number}</b>"
    lines = [
        head,
        f"residual {row.residual or '-'} · layers {format_number(row.n_layers, 'd')}"
        f" · d_model {format_number(row.d_model, 'd')} · heads {format_number(row.n_heads, 'd')}",
        f"mod_rate {format_number(row.mod_rate, 'g')} · lr {format_number(trial_lr(row), '.2e')}",
        f"val loss {format_number(row.val_loss, '.4f')} nats · {format_number(row.val_bpb, '.3f')} bits/byte",
        f"executed FLOPs/token {format_number(row.executed_flops_per_token, '.3g')}"
        f" · measured step time {_micro(seconds_per_token(row))}/token",
        f"tokens {format_number(row.tokens_seen, ',d')} · status {row.status}",
    ]
    if ratio is not None:
        lines.insert(-1, f"measured / counted cost {ratio:.2f} x the study's median")
    if row.failure_reason:
        lines.append(f"reason: {row.failure_reason[:80]}")
    return "<br>".join(lines)


# ---- Pareto front and hypervolume ------------------------------------------------------------


def _points_trace(
    rows: Sequence,
    search: str,
    index: int,
    name: str,
    axis: CostAxis = COUNTED,
    ratios: Mapping[int, float] | None = None,
    **kw,
) -> go.Scatter:
    """Markers for `rows` at (cost on `axis`, loss): colour by family, symbol by MoD rate, outline by search;
    `ratios` (trial id -> measured / counted cost) adds a hover line."""
    ratios = ratios or {}
    line_colour, _ = search_style(index)
    marker = dict(
        color=[family_colour(r.residual) for r in rows],
        symbol=[mod_symbol(r.mod_rate) for r in rows],
        size=11,
        line=dict(color=line_colour, width=1.5),
    )
    marker.update(kw.pop("marker", {}))
    return go.Scatter(
        x=kw.pop("x", [axis.of(r) for r in rows]),
        y=kw.pop("y", [r.val_loss for r in rows]),
        name=name,
        legendgroup=f"search:{search}",
        hovertext=[trial_hover(r, search, ratios.get(r.id)) for r in rows],
        hovertemplate="%{hovertext}<extra></extra>",
        customdata=[[search, r.number] for r in rows],
        marker=marker,
        **kw,
    )


def _unfinished_x(row, axis: CostAxis = COUNTED) -> float | None:
    """Where to draw a trial without a loss: its executed FLOPs, else nominal, else the sampled estimate
    (measured axis: its measured seconds per token, or None)."""
    if axis is not COUNTED:
        return axis.of(row)
    for x in (row.executed_flops_per_token, row.nominal_flops_per_token, row.config.get("executed_flops_per_token")):
        if _finite(x) and x > 0:
            return float(x)
    return None


def _loss_axis(rows_by_search: Mapping[str, Sequence]) -> tuple[float, float]:
    """(bottom, top edge) of the loss axis; points without a finite loss are drawn at the top edge."""
    losses = [r.val_loss for rows in rows_by_search.values() for r in rows if is_front_candidate(r)]
    lo, hi = (min(losses), max(losses)) if losses else (0.0, math.log(256))
    pad = 0.06 * ((hi - lo) or 1.0)
    return lo - pad, hi + pad


def _legend_keys(rows: Iterable) -> list[go.Scatter]:
    """Legend-only entries explaining the encodings: one per family (colour), one per MoD bin (symbol)."""
    rows = list(rows)
    keys = [
        go.Scatter(
            x=[None],
            y=[None],
            mode="markers",
            name=family,
            legendgroup="key:family",
            legendgrouptitle_text="residual (colour)",
            marker=dict(color=family_colour(family), size=10),
        )
        for family in sorted({r.residual or "?" for r in rows})
    ]
    bins = sorted({_mod_bin(r.mod_rate) for r in rows}, key=lambda b: [s for _, s, _ in MOD_SYMBOLS].index(b[0]))
    keys += [
        go.Scatter(
            x=[None],
            y=[None],
            mode="markers",
            name=f"MoD {label}",
            legendgroup="key:mod",
            legendgrouptitle_text="mod_rate (symbol)",
            marker=dict(color=OTHER_COLOUR, symbol=symbol, size=10),
        )
        for symbol, label in bins
    ]
    return keys


def pareto_figure(
    rows_by_search: Mapping[str, Sequence],
    show_dominated: bool = True,
    show_infeasible: bool = False,
    axis: CostAxis = COUNTED,
) -> go.Figure:
    """Validation loss vs cost per token on `axis` (log x; executed forward FLOPs by default), one front per
    search.

    Traces per search: "front: <search>" (the non-dominated completed trials of `nas.pareto` on `axis`,
    joined by a step line), "dominated: <search>" (the other completed trials, if `show_dominated`) and
    "not completed: <search>" (diverged, infeasible, stopped and failed trials, whose loss is inf,
    drawn with an "x" at the top edge, if `show_infeasible`). Running trials are never drawn, nor, on the
    measured axis, trials without a measured speed. Hovers give each trial's measured / counted cost.
    """
    fig = go.Figure()
    bottom, top = _loss_axis(rows_by_search)
    for index, (search, rows) in enumerate(rows_by_search.items()):
        front = pareto_rows(rows, key=axis.of)
        on_front = {r.id for r in front}
        ratios = cost_ratios(rows)
        line_colour, dash = search_style(index)
        fig.add_trace(
            _points_trace(
                front,
                search,
                index,
                f"front: {search}",
                axis,
                ratios,
                mode="lines+markers",
                line=dict(shape="hv", color=line_colour, dash=dash, width=2),
            )
        )
        if show_dominated:
            dominated = [r for r in rows if _on_axis(r, axis) and r.id not in on_front]
            fig.add_trace(
                _points_trace(
                    dominated, search, index, f"dominated: {search}", axis, ratios, mode="markers", opacity=0.55
                )
            )
        if show_infeasible:
            unfinished = [
                r
                for r in rows
                if r.status in NOT_ON_FRONT or (r.status == TrialStatus.COMPLETED and not is_front_candidate(r))
            ]
            drawn = [r for r in unfinished if _unfinished_x(r, axis) is not None]
            fig.add_trace(
                _points_trace(
                    drawn,
                    search,
                    index,
                    f"not completed: {search}",
                    axis,
                    ratios,
                    mode="markers",
                    x=[_unfinished_x(r, axis) for r in drawn],
                    y=[top] * len(drawn),
                    marker=dict(symbol="x", size=10, line=dict(width=0)),
                )
            )
    for key in _legend_keys(r for rows in rows_by_search.values() for r in rows if r.status not in PENDING):
        fig.add_trace(key)
    fig.update_layout(
        title=f"Validation loss vs {axis.short}"
        + (" (x at the top: not completed, loss inf)" if show_infeasible else ""),
        xaxis=dict(type="log", title=axis.title),
        yaxis=dict(title="validation loss (nats/token)", range=[bottom, top + 0.02 * (top - bottom)]),
        legend=dict(groupclick="toggleitem"),
        hovermode="closest",
        margin=dict(t=60),
    )
    return fig


def _on_axis(row, axis: CostAxis) -> bool:
    """A front candidate with a finite cost on `axis`: drawn among the completed trials there."""
    return is_front_candidate(row) and _finite(axis.of(row))


def cost_ratio_figure(rows_by_search: Mapping[str, Sequence]) -> go.Figure:
    """Each config's measured over counted cost (`dashboard.cost.cost_ratios`, the median of each search 1)
    against its executed FLOPs per token, both log; a line at 1.

    Above 1 a config takes more time per token than its counted FLOPs say, against the study's middle
    config; trials without a measured speed are not drawn.
    """
    fig = go.Figure()
    for index, (search, rows) in enumerate(rows_by_search.items()):
        ratios = cost_ratios(rows)
        shown = sorted((r for r in rows if r.id in ratios), key=lambda r: r.number)
        fig.add_trace(
            _points_trace(
                shown,
                search,
                index,
                f"measured / counted: {search}",
                COUNTED,
                ratios,
                mode="markers",
                y=[ratios[r.id] for r in shown],
                marker=dict(size=9),
            )
        )
    fig.add_hline(y=1.0, line_color="#222222", line_width=1, line_dash="dash")
    for key in _legend_keys(r for rows in rows_by_search.values() for r in rows if r.status not in PENDING):
        fig.add_trace(key)
    fig.update_layout(
        title="Measured / counted cost per config<br><sup>(step s/token) / (executed FLOPs/token), "
        "each search's median = 1: above 1, slower than its FLOPs say</sup>",
        xaxis=dict(type="log", title=COUNTED.title),
        yaxis=dict(type="log", title="measured / counted cost (x median)"),
        legend=dict(groupclick="toggleitem"),
        hovermode="closest",
        margin=dict(t=70),
    )
    return fig


def hypervolume_figure(rows_by_search: Mapping[str, Sequence], ref: tuple[float, float] | None = None) -> go.Figure:
    """Hypervolume after each trial (trial-number order) per search, against one reference point.

    `ref` defaults to `nas.pareto.reference_point` of all the rows together, so overlaid searches
    are measured against the same point. Running trials have no result yet and are left out.
    """
    if ref is None:
        ref = reference_point([r for rows in rows_by_search.values() for r in rows])
    fig = go.Figure()
    for index, (search, rows) in enumerate(rows_by_search.items()):
        ordered = sorted((r for r in rows if r.status not in PENDING), key=lambda r: r.number)
        colour, dash = search_style(index)
        fig.add_trace(
            go.Scatter(
                x=[r.number for r in ordered],
                y=hypervolume_curve(ordered, ref),
                name=search,
                mode="lines+markers",
                line=dict(shape="hv", color=colour, dash=dash),
                hovertemplate="trial #%{x}<br>hypervolume %{y:.4g}<extra>" + search + "</extra>",
            )
        )
    fig.update_layout(
        title=f"Hypervolume after each trial<br><sup>reference point: val loss {ref[0]:.4f} nats, "
        f"executed FLOPs/token {ref[1]:.4g}</sup>",
        xaxis_title="trial number",
        yaxis_title="hypervolume (loss x FLOPs/token)",
        margin=dict(t=70),
    )
    return fig


# ---- at the target budget --------------------------------------------------------------------


def _group_label(group: str | None) -> str:
    """A fit group in words (`nas.extrapolate`: a family, the whole study, or no fit)."""
    return {STUDY: "shared by the study", NONE: "no fit", "-": "no fit", None: "-"}.get(group, f"family {group}")


def _band_error(predictions: Sequence[Prediction]) -> dict:
    """Asymmetric error bars from each prediction to the ends of its band."""
    return dict(
        type="data",
        symmetric=False,
        array=[p.high - p.loss for p in predictions],
        arrayminus=[p.loss - p.low for p in predictions],
        thickness=1.2,
        width=4,
    )


def _prediction_hover(p: Prediction, target: float) -> str:
    loo = "-" if p.loo_error is None else f"{p.loo_error:+.4f}"
    return (
        f"<br>predicted at T = {target:.3g}: {format_number(p.loss, '.4f')} "
        f"({BAND_LEVEL:.0%} band {format_number(p.low, '.4f')}-{format_number(p.high, '.4f')})"
        f"<br>rungs {p.rungs} · LOO error {loo} · fit {_group_label(p.group)}"
    )


def rung_means(rung_rows: Iterable[RungRow]) -> dict[int, dict[int, tuple[float, int]]]:
    """rung -> trial number -> (mean of the finite losses over its seeds, how many): what each rung measured.

    A (trial, rung) whose every seed has no finite loss (diverged there) is left out.
    """
    losses: dict[int, dict[int, list[float]]] = {}
    for r in rung_rows:
        if _finite(r.val_loss):
            losses.setdefault(r.rung, {}).setdefault(r.number, []).append(r.val_loss)
    return {
        rung: {n: (sum(v) / len(v), len(v)) for n, v in sorted(by_trial.items())}
        for rung, by_trial in sorted(losses.items())
    }


def _nondominated(points: Sequence[tuple[int, float, float]]) -> list[tuple[int, float, float]]:
    """The non-dominated (number, FLOPs/token, loss) of `points`, by FLOPs: the rule of `nas.pareto`."""
    rows = [
        SimpleNamespace(number=n, status=TrialStatus.COMPLETED, executed_flops_per_token=x, val_loss=y)
        for n, x, y in points
    ]
    return [(r.number, r.executed_flops_per_token, r.val_loss) for r in pareto_rows(rows)]


def _rung_colours(n: int) -> list[str]:
    return sample_colorscale("Plasma", [0.85 * k / max(n - 1, 1) for k in range(n)])


def _target_trace(
    rows: Sequence,
    measured: Mapping[int, Any],
    predictions: Mapping[int, Prediction],
    target: float,
    name: str,
    axis: CostAxis = COUNTED,
    **kw,
) -> go.Scatter:
    """Markers at (cost on `axis`, predicted loss at T) with the band as error bars; encodings as the
    Pareto plot (colour: family, symbol: MoD rate)."""
    preds = [predictions[r.number] for r in rows]
    return go.Scatter(
        x=[axis.of(r) for r in rows],
        y=[p.loss for p in preds],
        error_y=_band_error(preds),
        name=name,
        customdata=[[r.number] for r in rows],
        hovertext=[
            trial_hover(measured[r.number]) + _prediction_hover(p, target) for r, p in zip(rows, preds, strict=True)
        ],
        hovertemplate="%{hovertext}<extra></extra>",
        marker=dict(
            color=[family_colour(r.residual) for r in rows],
            symbol=[mod_symbol(r.mod_rate) for r in rows],
            size=11,
            line=dict(color="#222222", width=1.5),
        ),
        **kw,
    )


def target_front_figure(
    rows: Sequence,
    predictions: Mapping[int, Prediction],
    target: float,
    rung_rows: Sequence[RungRow] = (),
    axis: CostAxis = COUNTED,
) -> go.Figure:
    """Predicted loss at the target T vs cost per token on `axis` (left; executed FLOPs by default), beside the
    loss measured at each rung (right); x axes log, y axis shared.

    Left, from the trial rows and `nas.fidelity.predict_search`'s predictions: "front at T", the trials of
    `nas.fidelity.front_at_target(rows, predictions)` (completed, non-dominated at their predicted loss)
    joined by a step line, and "dominated at T", the other completed trials with a finite prediction; each
    with its 80% band as error bars. Right, from the search's `RungRow`s, per stored rung r (0 = the lowest
    budget C): "rung r measured", each trial's mean loss over its seeds at rung r (whatever the trial's status
    now: a rung is a finished measurement), and "rung r front", their non-dominated points as a step line.
    On the measured axis every point sits at its trial's measured seconds per token (a rung of a trial
    without one is not drawn) and every front is recomputed there.
    """
    targeted = at_target(rows, predictions)
    measured = {r.number: r for r in rows}
    front = front_at_target(rows, predictions, key=axis.of)
    on_front = {r.number for r in front}
    dominated = [r for r in targeted if _on_axis(r, axis) and r.number not in on_front]
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        horizontal_spacing=0.05,
        subplot_titles=(
            f"predicted at T = {target:.3g} training FLOPs ({BAND_LEVEL:.0%} band)",
            "measured at each rung",
        ),
    )
    fig.add_trace(
        _target_trace(
            front,
            measured,
            predictions,
            target,
            "front at T",
            axis,
            mode="lines+markers",
            line=dict(shape="hv", color="#222222", width=2),
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        _target_trace(dominated, measured, predictions, target, "dominated at T", axis, mode="markers", opacity=0.55),
        row=1,
        col=1,
    )
    if axis is COUNTED:
        flops = {r.number: r.executed_flops_per_token for r in rung_rows if _finite(r.executed_flops_per_token)}
    else:
        flops = {r.number: x for r in rows if _finite(x := axis.of(r))}
    budgets = {r.rung: r.budget_flops for r in rung_rows}
    means = rung_means(rung_rows)
    for colour, (rung, by_trial) in zip(_rung_colours(len(means)), means.items(), strict=True):
        pts = [(n, flops[n], loss) for n, (loss, _) in by_trial.items() if n in flops]
        seeds = [by_trial[n][1] for n, _, _ in pts]
        fig.add_trace(
            go.Scatter(
                x=[x for _, x, _ in pts],
                y=[y for _, _, y in pts],
                name=f"rung {rung} measured",
                legendgroup=f"rung:{rung}",
                legendgrouptitle_text="measured (budget)" if rung == min(means) else None,
                mode="markers",
                marker=dict(color=colour, size=9),
                customdata=[[n, k] for (n, _, _), k in zip(pts, seeds, strict=True)],
                hovertemplate=f"trial #%{{customdata[0]}} · rung {rung} ({budgets[rung]:.3g} training FLOPs)"
                f"<br>loss %{{y:.4f}} (mean of %{{customdata[1]}} seeds)<br>{axis.short} %{{x:.3g}}<extra></extra>",
            ),
            row=1,
            col=2,
        )
        edge = _nondominated(pts)
        fig.add_trace(
            go.Scatter(
                x=[x for _, x, _ in edge],
                y=[y for _, _, y in edge],
                name=f"rung {rung} front",
                legendgroup=f"rung:{rung}",
                showlegend=False,
                mode="lines",
                line=dict(shape="hv", color=colour, width=1.5),
                customdata=[[n] for n, _, _ in edge],
                hoverinfo="skip",
            ),
            row=1,
            col=2,
        )
    for key in _legend_keys(r for r in rows if r.status not in PENDING):
        fig.add_trace(key, row=1, col=1)
    fig.update_xaxes(type="log", title_text=axis.title)
    fig.update_yaxes(title_text="validation loss (nats/token)", row=1, col=1)
    fig.update_layout(
        title=f"Front at the target budget, and the fronts measured at each rung, on {axis.short}",
        legend=dict(groupclick="toggleitem"),
        hovermode="closest",
        margin=dict(t=80),
    )
    return fig


def _fit_params(fit_or_params: Any, number: int) -> tuple[float, float, float, str | None]:
    if hasattr(fit_or_params, "params"):  # a nas.extrapolate.StudyFit
        return fit_or_params.params(number)
    e, a, alpha, *group = fit_or_params
    return float(e), float(a), float(alpha), group[0] if group else None


def rung_curve_figure(
    rung_rows: Sequence[RungRow],
    fit_or_params: Any,
    target: float,
    prediction: Prediction | None = None,
    n_points: int = 120,
) -> go.Figure:
    """One trial's rungs and fitted curve against training FLOPs (log x), out to the target T.

    `rung_rows` are the trial's `RungRow`s (one per rung and seed: "measured", at each rung's budget);
    `fit_or_params` the search's `nas.extrapolate.StudyFit` or the trial's (E, A, alpha[, group]) as
    `StudyFit.params` gives them. "fit" draws L(C) = E + A C^-alpha at `n_points` budgets spaced evenly in
    log C from the lowest rung's budget to exactly `target`; "predicted at T" marks the loss at T with the
    80% band of `prediction` (`nas.fidelity.Prediction`) as error bars, or the curve's value there, without
    a band, when no prediction is given.
    """
    numbers = {r.number for r in rung_rows}
    if len(numbers) != 1:
        raise ValueError(f"rung_curve_figure: needs the rungs of one trial (got trials {sorted(numbers)})")
    number = numbers.pop()
    e, a, alpha, group = _fit_params(fit_or_params, number)
    rung_rows = sorted(rung_rows, key=lambda r: (r.rung, r.seed))
    start = min(r.budget_flops for r in rung_rows)
    xs = np.geomspace(start, target, n_points) if target > start else np.array([start])
    xs[0], xs[-1] = start, target
    shown = [r for r in rung_rows if _finite(r.val_loss)]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[r.budget_flops for r in shown],
            y=[r.val_loss for r in shown],
            name="measured",
            mode="markers",
            marker=dict(size=10, color="#1f77b4"),
            customdata=[[r.rung, r.seed, r.steps, r.tokens, r.training_flops] for r in shown],
            hovertemplate="rung %{customdata[0]} · seed %{customdata[1]}<br>budget %{x:.3g} training FLOPs"
            "<br>val loss %{y:.4f}<br>%{customdata[2]} steps · %{customdata[3]:,} tokens"
            " · %{customdata[4]:.3g} FLOPs trained<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=xs.tolist(),
            y=(e + a * xs**-alpha).tolist(),
            name="fit L = E + A C^-α",
            mode="lines",
            line=dict(color="#7f7f7f", dash="dash"),
            hovertemplate="C %{x:.3g}<br>fitted loss %{y:.4f}<extra></extra>",
        )
    )
    loss = prediction.loss if prediction is not None else float(e + a * target**-alpha)
    fig.add_trace(
        go.Scatter(
            x=[target],
            y=[loss],
            name="predicted at T",
            mode="markers+text",
            text=["T"],
            textposition="top center",
            marker=dict(size=12, symbol="diamond", color="#d62728"),
            error_y=_band_error([prediction]) if prediction is not None else None,
            hovertemplate=f"T = {target:.3g} training FLOPs<br>predicted loss %{{y:.4f}}"
            + (f" ({BAND_LEVEL:.0%} band {prediction.low:.4f}-{prediction.high:.4f})" if prediction is not None else "")
            + "<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"Trial #{number}: loss vs training compute, out to the target"
        f"<br><sup>L = E + A C^-α with E {e:.4f}, A {a:.4g}, α {alpha:.3f} (fit {_group_label(group)})</sup>",
        xaxis=dict(type="log", title="training FLOPs (C)"),
        yaxis_title="validation loss (nats/token)",
        margin=dict(t=80),
    )
    return fig


def fidelity_figure(predictions: Mapping[int, Prediction]) -> go.Figure:
    """The leave-one-out error of each trial with two or more rungs, as bars, with a line at 0.

    The error (`Prediction.loo_error`, nats/token) is the trial's top rung as predicted by a fit without that
    rung, minus the loss measured there: above 0 the fit predicted too high a loss. When no trial has two
    rungs the figure holds no bars, only a note saying so.
    """
    items = [(n, p) for n, p in sorted(predictions.items()) if p.loo_error is not None and _finite(p.loo_error)]
    fig = go.Figure()
    if not items:
        fig.add_annotation(
            text="no trial has two rungs yet: no leave-one-out error to show",
            xref="paper",
            yref="paper",
            x=0.5,
            y=0.5,
            showarrow=False,
            font=dict(size=14),
        )
        fig.update_layout(title="Leave-one-out error of the top rung", xaxis_visible=False, yaxis_visible=False)
        return fig
    errors = [p.loo_error for _, p in items]
    fig.add_trace(
        go.Bar(
            x=[f"#{n}" for n, _ in items],
            y=errors,
            name="leave-one-out error",
            marker_color=["#d62728" if err > 0 else "#1f77b4" for err in errors],
            customdata=[[n, p.rungs, _group_label(p.group)] for n, p in items],
            hovertemplate="trial #%{customdata[0]} · %{customdata[1]} rungs · fit %{customdata[2]}"
            "<br>top rung predicted - measured: %{y:+.4f} nats<extra></extra>",
        )
    )
    fig.add_hline(y=0.0, line_color="#222222", line_width=1)
    mae = sum(abs(err) for err in errors) / len(errors)
    fig.update_layout(
        title=f"Leave-one-out error of the top rung<br><sup>mean |error| {mae:.4f} nats over {len(items)} trials "
        "with two or more rungs</sup>",
        xaxis=dict(title="trial", type="category"),
        yaxis_title="predicted - measured (nats/token)",
        margin=dict(t=80),
    )
    return fig


def fidelity_benchmark_frame(summary: Mapping) -> pd.DataFrame:
    """The fidelity benchmark's acceptance figures (`benchmarks/fidelity.py`) beside their
    goals: how far a ranking at T predicted from a ladder agrees with the ranking trained there.

    Columns: figure, value (as text), goal, met (<NA> where the figure has no goal). The prediction's Kendall tau
    must reach its goal and beat every baseline (lowest rung, top rung, parameter count)."""
    taus = summary["kendall_tau"]
    baselines = [taus[k] for k in ("lowest_rung", "top_rung", "parameter_count") if taus.get(k) is not None]
    goals = summary.get("goals", {})
    tau_goal = goals.get("prediction_tau", 0.8)
    hv_goal = goals.get("hypervolume_ratio", 0.95)
    share_goal = goals.get("ladder_compute_share", 0.15)
    prediction = taus.get("prediction")
    rows = [
        ("Kendall tau: prediction at T", prediction, f">= {tau_goal:g} and above every baseline",
         prediction is not None and prediction >= tau_goal and all(prediction > b for b in baselines)),
        ("Kendall tau: top rung alone", taus.get("top_rung"), "baseline", None),
        ("Kendall tau: lowest rung alone", taus.get("lowest_rung"), "baseline", None),
        ("Kendall tau: parameter count", taus.get("parameter_count"), "baseline", None),
        ("noise ceiling (tau of a perfect predictor)", summary.get("tau_ceiling"), "", None),
        ("true best in the predicted top 3", summary["true_best_in_predicted_top3"], "yes",
         bool(summary["true_best_in_predicted_top3"])),
        ("hypervolume ratio (predicted front on true losses)", summary["hypervolume_ratio"], f">= {hv_goal:g}",
         summary["hypervolume_ratio"] >= hv_goal),
        ("ladder compute / truth's", summary["ladder_compute_share"], f"<= {share_goal:g}",
         summary["ladder_compute_share"] <= share_goal),
        ("prediction's mean absolute error (nats)", summary.get("prediction_mean_abs_error"), "", None),
    ]  # fmt: skip
    frame = pd.DataFrame(rows, columns=["figure", "value", "goal", "met"])
    frame["value"] = [_figure_text(v) for v in frame["value"]]
    return frame.astype({"met": "boolean"})


def _figure_text(value: Any) -> str:
    """A benchmark figure as text: yes/no, 3 decimals, or '-' where the benchmark could not compute it."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return format_number(value, ".3f")


def target_frame(rows: Sequence, predictions: Mapping[int, Prediction], axis: CostAxis = COUNTED) -> pd.DataFrame:
    """One row per trial with a prediction: its measured (top-rung) loss, the predicted loss at the target and
    band, rungs, leave-one-out error and fit group, both costs per token, its measured / counted cost
    (`dashboard.cost.cost_ratios`), and whether it is on the front at T on `axis`; by number."""
    front = {r.number for r in front_at_target(rows, predictions, key=axis.of)}
    ratios = cost_ratios(rows)
    columns = (
        "number",
        "status",
        "residual",
        "rungs",
        "val_loss",
        "loss_at_T",
        "band_low",
        "band_high",
        "loo_error",
        "executed_flops_per_token",
        "measured_s_per_token",
        "cost_ratio",
        "fit",
        "on_front_at_T",
    )
    records = [
        dict(
            number=r.number,
            status=str(r.status),
            residual=r.residual,
            rungs=p.rungs,
            val_loss=r.val_loss,
            loss_at_T=p.loss,
            band_low=p.low,
            band_high=p.high,
            loo_error=p.loo_error,
            executed_flops_per_token=r.executed_flops_per_token,
            measured_s_per_token=seconds_per_token(r),
            cost_ratio=ratios.get(r.id),
            fit=_group_label(p.group),
            on_front_at_T=r.number in front,
        )
        for r in sorted(rows, key=lambda r: r.number)
        if (p := predictions.get(r.number)) is not None
    ]
    return pd.DataFrame.from_records(records, columns=list(columns))


# ---- one trial -------------------------------------------------------------------------------


def loss_curve_figure(curve: Sequence[Mapping]) -> go.Figure:
    """Train loss (line) and validation loss (markers where evaluated) against tokens seen."""
    use_tokens = all(p.get("tokens") is not None for p in curve)
    x_of = (lambda p: p["tokens"]) if use_tokens else (lambda p: p["step"])
    hover = "step %{customdata[0]}<br>tokens %{customdata[1]:,}<br>training FLOPs %{customdata[2]:.3g}<br>"
    fig = go.Figure()
    for key, name, mode in (("train_loss", "train loss", "lines"), ("val_loss", "val loss", "lines+markers")):
        pts = [p for p in curve if _finite(p.get(key))]
        fig.add_trace(
            go.Scatter(
                x=[x_of(p) for p in pts],
                y=[p[key] for p in pts],
                name=name,
                mode=mode,
                customdata=[[p.get("step"), p.get("tokens") or 0, p.get("training_flops") or 0] for p in pts],
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
    degrees = [None if not _finite(a) else math.degrees(a) for a in angle]
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


def width_figure(rows_with_width: Sequence[tuple[Any, Mapping]]) -> go.Figure:
    """d_align (left) and p_hat(8, 8) (right) against d_model, one point per trial.

    `rows_with_width` pairs each `TrialRow` with its width certificate dict (`Store.width`).
    """
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("effective alignment dimension d_align", "empirical misalignment p̂(8, 8)")
    )
    rows = [r for r, _ in rows_with_width]
    widths = [w for _, w in rows_with_width]
    for col, key in ((1, "d_align"), (2, "p_hat_8_8")):
        fig.add_trace(
            go.Scatter(
                x=[w.get("d_model") for w in widths],
                y=[w.get(key) for w in widths],
                mode="markers",
                name=key,
                marker=dict(
                    color=[family_colour(r.residual) for r in rows],
                    symbol=[mod_symbol(r.mod_rate) for r in rows],
                    size=10,
                    line=dict(color="#222222", width=1),
                ),
                hovertext=[
                    trial_hover(r) + f"<br>{key} {format_number(w.get(key), '.4g')}" for r, w in rows_with_width
                ],
                hovertemplate="%{hovertext}<extra></extra>",
                showlegend=False,
            ),
            row=1,
            col=col,
        )
    for key in _legend_keys(rows):
        fig.add_trace(key, row=1, col=1)
    fig.update_xaxes(type="log", title_text="d_model")
    fig.update_yaxes(title_text="d_align", type="log", row=1, col=1)
    fig.update_yaxes(title_text="p̂(8, 8)", row=1, col=2)
    fig.update_layout(title="Width certificate across trials")
    return fig


# ---- tables ----------------------------------------------------------------------------------

TRIAL_COLUMNS = (
    "number",
    "status",
    "residual",
    "n_layers",
    "d_model",
    "n_heads",
    "mod_rate",
    "lr",
    "val_loss",
    "val_bpb",
    "executed_flops_per_token",
    "nominal_flops_per_token",
    "realised_flops_per_token",
    "tokens_seen",
    "training_flops",
    "wall_time_s",
    "tokens_per_s",
    "measured_s_per_token",
    "cost_ratio",
    "attempt",
    "failure_reason",
    "on_front",
    "trial_id",
)
_CONFIG_NOISE = {"arch", "optim", "run", "optuna_number", "infeasible_reason", "executed_flops_per_token"}


def _config_params(row) -> dict:
    """The flat sampled knobs of the config that are not already a column (mlp_ratio, warmup, ...)."""
    return {
        k: v
        for k, v in row.config.items()
        if k not in _CONFIG_NOISE and k not in TRIAL_COLUMNS and isinstance(v, (int, float, str, bool))
    }


def trials_frame(rows: Sequence, axis: CostAxis = COUNTED) -> pd.DataFrame:
    """One row per trial, flat columns (`TRIAL_COLUMNS`, then the other sampled knobs), by number.

    `measured_s_per_token` is the training step's seconds per token and `cost_ratio` the trial's measured over
    counted cost with the median among `rows` 1 (`dashboard.cost`); `on_front` is on `axis`.
    """
    front = {r.id for r in pareto_rows(rows, key=axis.of)}
    ratios = cost_ratios(rows)
    records = []
    for r in sorted(rows, key=lambda r: r.number):
        record = {name: getattr(r, name, None) for name in TRIAL_COLUMNS}
        record.update(
            lr=trial_lr(r),
            measured_s_per_token=seconds_per_token(r),
            cost_ratio=ratios.get(r.id),
            on_front=r.id in front,
            trial_id=r.id,
        )
        records.append({**record, **_config_params(r)})
    frame = pd.DataFrame.from_records(records, columns=None if records else list(TRIAL_COLUMNS))
    for name in frame.columns[len(TRIAL_COLUMNS) :]:  # a knob with mixed types would not convert to Arrow
        if len({type(v) for v in frame[name].dropna()}) > 1:
            frame[name] = frame[name].map(lambda v: None if v is None else str(v))
    return frame.reset_index(drop=True)


def searches_frame(
    summaries: Sequence, searches: Mapping[str, Any], rows_by_search: Mapping[str, Sequence]
) -> pd.DataFrame:
    """One row per search: status, budget, trial counts, best loss and hypervolume with its reference point.

    "done" counts finished trials (completed, diverged, stopped, infeasible) as `nas list` does.
    """
    records = []
    for s in summaries:
        budget = getattr(searches.get(s.name), "budget", None) or {}
        rows = rows_by_search.get(s.name, [])
        ref = reference_point(rows)
        records.append(
            dict(
                search=s.name,
                status=s.status,
                created=s.created_at,
                trial_flops=budget.get("trial_flops"),
                search_flops=budget.get("search_flops"),
                requested=s.requested_trials,
                done=s.completed + s.other,
                completed=s.completed,
                failed=s.failed,
                running=s.running,
                best_val_loss=s.best_val_loss,
                on_front=len(pareto_rows(rows)),
                hypervolume=hypervolume(rows, ref),
                reference_point=f"loss {ref[0]:.4f}, FLOPs/token {ref[1]:.4g}",
            )
        )
    return pd.DataFrame.from_records(records)
