"""The Pareto fronts of an overlay of searches: loss against cost, measured over counted cost, hypervolume.

`pareto_figure` draws validation loss against cost per token, one front per search; its x-axis is a
`dashboard.cost.CostAxis` (counted executed FLOPs per token, the default and the search's objective; counted
KV-cache bytes or decode FLOPs per token; or measured training-step seconds per token), and the front is
recomputed on the axis drawn.
`cost_ratio_figure` shows each config's measured over counted cost (each search's median 1), and
`hypervolume_figure` the hypervolume after each trial. Markers follow `dashboard.style`: colour the family,
symbol the MoD rate, outline and line dash the search. Pure functions of store rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from nas.answer.pareto import hypervolume_curve, is_front_candidate, pareto_rows, reference_point
from workers.status import PENDING, TrialStatus

from .cost import COUNTED, CostAxis, cost_ratios
from .style import family_colour, is_finite, legend_keys, mod_symbol, search_style, trial_hover

__all__ = ["cost_ratio_figure", "hypervolume_figure", "on_axis", "pareto_figure"]

# Ended without a loss that may sit on a front (inf or partial).
NOT_ON_FRONT = (
    TrialStatus.DIVERGED,
    TrialStatus.INFEASIBLE,
    TrialStatus.STOPPED,
    TrialStatus.FAILED,
    TrialStatus.INTERRUPTED,
)


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
    """Where to draw a trial without a loss: its executed FLOPs (counted when it started), else nominal (another
    axis: its cost there, or None)."""
    if axis is not COUNTED:
        return axis.of(row)
    for x in (row.executed_flops_per_token, row.nominal_flops_per_token):
        if is_finite(x) and x > 0:
            return float(x)
    return None


def _loss_axis(rows_by_search: Mapping[str, Sequence]) -> tuple[float, float]:
    """(bottom, top edge) of the loss axis; points without a finite loss are drawn at the top edge."""
    losses = [r.val_loss for rows in rows_by_search.values() for r in rows if is_front_candidate(r)]
    lo, hi = (min(losses), max(losses)) if losses else (0.0, math.log(256))
    pad = 0.06 * ((hi - lo) or 1.0)
    return lo - pad, hi + pad


def on_axis(row, axis: CostAxis) -> bool:
    """A front candidate with a finite cost on `axis`: drawn among the completed trials there."""
    return is_front_candidate(row) and is_finite(axis.of(row))


def _overlay_keys(rows_by_search: Mapping[str, Sequence]) -> list[go.Scatter]:
    """The encoding legend of every trial of the overlay that has a result (running trials left out)."""
    return legend_keys(r for rows in rows_by_search.values() for r in rows if r.status not in PENDING)


def _search_traces(
    search: str,
    index: int,
    rows: Sequence,
    axis: CostAxis,
    top: float,
    show_dominated: bool,
    show_infeasible: bool,
) -> list[go.Scatter]:
    """One search's traces on the Pareto plot: its front, then (when shown) dominated and not-completed trials."""
    front = pareto_rows(rows, key=axis.of)
    on_front = {r.id for r in front}
    ratios = cost_ratios(rows)
    line_colour, dash = search_style(index)
    line = dict(shape="hv", color=line_colour, dash=dash, width=2)
    traces = [_points_trace(front, search, index, f"front: {search}", axis, ratios, mode="lines+markers", line=line)]
    if show_dominated:
        dominated = [r for r in rows if on_axis(r, axis) and r.id not in on_front]
        traces.append(
            _points_trace(dominated, search, index, f"dominated: {search}", axis, ratios, mode="markers", opacity=0.55)
        )
    if show_infeasible:
        traces.append(_unfinished_trace(search, index, rows, axis, ratios, top))
    return traces


def _unfinished_trace(
    search: str, index: int, rows: Sequence, axis: CostAxis, ratios: Mapping[int, float], top: float
) -> go.Scatter:
    """ "not completed: <search>": the trials that ended without a front loss, as an "x" at the top edge."""
    unfinished = [
        r for r in rows if r.status in NOT_ON_FRONT or (r.status == TrialStatus.COMPLETED and not is_front_candidate(r))
    ]
    drawn = [r for r in unfinished if _unfinished_x(r, axis) is not None]
    return _points_trace(
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


def _pareto_layout(axis: CostAxis, bottom: float, top: float, show_infeasible: bool, unit: str) -> dict:
    """The Pareto plot's layout: log cost axis, loss axis (in `unit`) from `bottom` to just above `top`."""
    return dict(
        title=f"Validation loss vs {axis.short}"
        + (" (x at the top: not completed, loss inf)" if show_infeasible else ""),
        xaxis=dict(type="log", title=axis.title),
        yaxis=dict(title=f"validation loss ({unit})", range=[bottom, top + 0.02 * (top - bottom)]),
        legend=dict(groupclick="toggleitem"),
        hovermode="closest",
        margin=dict(t=60),
    )


def pareto_figure(
    rows_by_search: Mapping[str, Sequence],
    show_dominated: bool = True,
    show_infeasible: bool = False,
    axis: CostAxis = COUNTED,
    unit: str = "nats/token",
) -> go.Figure:
    """Validation loss vs cost per token on `axis` (log x; executed forward FLOPs by default), one front per
    search; `unit` names what the rows' val_loss holds (the page passes bits per byte in val_loss to
    compare searches with different tokenizers).

    Traces per search: "front: <search>" (the non-dominated completed trials of `nas.answer.pareto` on `axis`,
    joined by a step line), "dominated: <search>" (the other completed trials, if `show_dominated`) and
    "not completed: <search>" (diverged, infeasible, stopped and failed trials, whose loss is inf,
    drawn with an "x" at the top edge, if `show_infeasible`). Running trials are never drawn, nor, on the
    measured axis, trials without a measured speed. Hovers give each trial's measured / counted cost.
    """
    fig = go.Figure()
    bottom, top = _loss_axis(rows_by_search)
    for index, (search, rows) in enumerate(rows_by_search.items()):
        for trace in _search_traces(search, index, rows, axis, top, show_dominated, show_infeasible):
            fig.add_trace(trace)
    for key in _overlay_keys(rows_by_search):
        fig.add_trace(key)
    fig.update_layout(**_pareto_layout(axis, bottom, top, show_infeasible, unit))
    return fig


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
    for key in _overlay_keys(rows_by_search):
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

    `ref` defaults to `nas.answer.pareto.reference_point` of all the rows together, so overlaid searches
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
