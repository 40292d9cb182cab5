"""Figures at the target budget T (`nas.answer.target`): what each trial's rungs predict there, and how well.

`target_front_figure` draws each trial's predicted loss at T with its 80% band beside the measured front of
each rung, `rung_curve_figure` one trial's rungs and fitted curve L = E + A C^-alpha up to T, and
`fidelity_figure` the leave-one-out errors of the fits. `rung_means` is what each rung measured per trial.
Markers follow `dashboard.style`; the fronts' x-axis is a `dashboard.cost.CostAxis`, as on the Pareto plot.
Pure functions of store rows and predictions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from nas.answer.pareto import FrontPoint, pareto_rows
from nas.answer.target import BAND_LEVEL, Prediction, at_target, front_at_target
from nas.store import RungRow
from workers.status import PENDING

from .cost import COUNTED, CostAxis
from .front_figures import on_axis
from .style import family_colour, format_number, group_label, is_finite, legend_keys, mod_symbol, trial_hover

__all__ = ["band_text", "fidelity_figure", "loss_label", "rung_curve_figure", "rung_means", "target_front_figure"]


def _band_error(predictions: Sequence[Prediction]) -> dict:
    """Asymmetric error bars from each prediction to the ends of its band."""
    return dict(
        type="data",
        symmetric=False,
        array=[p.high - p.loss if p.high is not None else 0.0 for p in predictions],
        arrayminus=[p.loss - p.low if p.low is not None else 0.0 for p in predictions],
        thickness=1.2,
        width=4,
    )


def band_text(p: Prediction) -> str:
    """`80% band 1.9012-1.9630`; `no band: not a loss at T` for a top rung's loss no curve carried to T; `no band`
    where nothing measured its error."""
    if not p.at_target:
        return "no band: not a loss at T"
    if p.low is None or p.high is None:
        return "no band"
    return f"{BAND_LEVEL:.0%} band {format_number(p.low, '.4f')}-{format_number(p.high, '.4f')}"


def loss_label(p: Prediction, target: float) -> str:
    """What a prediction's loss is: `loss at T = 1e12` or `top rung's loss (bias taken out), not at T`."""
    return f"loss at T = {target:.3g}" if p.at_target else "top rung's loss (bias taken out), not at T"


def _prediction_hover(p: Prediction, target: float) -> str:
    loo = "-" if p.loo_error is None else f"{p.loo_error:+.4f}"
    return (
        f"<br>{loss_label(p, target)}: {format_number(p.loss, '.4f')} ({band_text(p)})"
        f"<br>rungs {p.rungs} · {p.basis} · held-out error {loo} · curve {group_label(p.group)}"
    )


def rung_means(rung_rows: Iterable[RungRow]) -> dict[int, dict[int, tuple[float, int]]]:
    """rung -> trial number -> (mean of the finite losses over its seeds, how many): what each rung measured.

    A (trial, rung) whose every seed has no finite loss (diverged there) is left out.
    """
    losses: dict[int, dict[int, list[float]]] = {}
    for r in rung_rows:
        if is_finite(r.val_loss):
            losses.setdefault(r.rung, {}).setdefault(r.number, []).append(r.val_loss)
    return {
        rung: {n: (sum(v) / len(v), len(v)) for n, v in sorted(by_trial.items())}
        for rung, by_trial in sorted(losses.items())
    }


def _nondominated(points: Sequence[tuple[int, float, float]]) -> list[tuple[int, float, float]]:
    """The non-dominated (number, cost, loss) of `points`, by cost: the rule of `nas.answer.pareto`."""
    rows = [FrontPoint(number=n, val_loss=y, executed_flops_per_token=x) for n, x, y in points]
    return [(r.number, r.executed_flops_per_token, r.val_loss) for r in pareto_rows(rows)]


def _rung_colours(n: int) -> list[str]:
    return sample_colorscale("Plasma", [0.85 * k / max(n - 1, 1) for k in range(n)])


# ---- the front at T beside the front of each rung ---------------------------------------------


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


def _at_target_traces(
    rows: Sequence, predictions: Mapping[int, Prediction], target: float, axis: CostAxis
) -> list[go.Scatter]:
    """The left panel: "front at T" (a step line) and "dominated at T", each with its band."""
    targeted = at_target(rows, predictions)
    measured = {r.number: r for r in rows}
    front = front_at_target(rows, predictions, key=axis.of)
    on_front = {r.number for r in front}
    dominated = [r for r in targeted if on_axis(r, axis) and r.number not in on_front]
    line = dict(shape="hv", color="#222222", width=2)
    return [
        _target_trace(front, measured, predictions, target, "front at T", axis, mode="lines+markers", line=line),
        _target_trace(dominated, measured, predictions, target, "dominated at T", axis, mode="markers", opacity=0.55),
    ]


def _rung_costs(rows: Sequence, rung_rows: Sequence[RungRow], axis: CostAxis) -> dict[int, float]:
    """Trial number -> its cost on `axis` in the rung panel: the rungs' executed FLOPs per token when counted,
    else the trial's measured cost (a trial without one is absent)."""
    if axis is COUNTED:
        return {r.number: r.executed_flops_per_token for r in rung_rows if is_finite(r.executed_flops_per_token)}
    return {r.number: x for r in rows if is_finite(x := axis.of(r))}


def _rung_measured_trace(
    rung: int,
    pts: Sequence[tuple[int, float, float]],
    seeds: Sequence[int],
    colour: str,
    budget: float,
    axis: CostAxis,
    first: bool,
) -> go.Scatter:
    """ "rung r measured": each trial's mean loss over its seeds at rung `rung`, at (cost, loss) `pts`; the
    `first` (lowest) rung titles the legend group."""
    return go.Scatter(
        x=[x for _, x, _ in pts],
        y=[y for _, _, y in pts],
        name=f"rung {rung} measured",
        legendgroup=f"rung:{rung}",
        legendgrouptitle_text="measured (budget)" if first else None,
        mode="markers",
        marker=dict(color=colour, size=9),
        customdata=[[n, k] for (n, _, _), k in zip(pts, seeds, strict=True)],
        hovertemplate=f"trial #%{{customdata[0]}} · rung {rung} ({budget:.3g} training FLOPs)"
        f"<br>loss %{{y:.4f}} (mean of %{{customdata[1]}} seeds)<br>{axis.short} %{{x:.3g}}<extra></extra>",
    )


def _rung_front_trace(rung: int, pts: Sequence[tuple[int, float, float]], colour: str) -> go.Scatter:
    """ "rung r front": the non-dominated points of one rung as a step line, grouped with its markers."""
    edge = _nondominated(pts)
    return go.Scatter(
        x=[x for _, x, _ in edge],
        y=[y for _, _, y in edge],
        name=f"rung {rung} front",
        legendgroup=f"rung:{rung}",
        showlegend=False,
        mode="lines",
        line=dict(shape="hv", color=colour, width=1.5),
        customdata=[[n] for n, _, _ in edge],
        hoverinfo="skip",
    )


def _rung_traces(rung_rows: Sequence[RungRow], costs: Mapping[int, float], axis: CostAxis) -> list[go.Scatter]:
    """The right panel: per stored rung, its measured points then its front, coloured lowest rung first."""
    budgets = {r.rung: r.budget_flops for r in rung_rows}
    means = rung_means(rung_rows)
    traces = []
    for colour, (rung, by_trial) in zip(_rung_colours(len(means)), means.items(), strict=True):
        pts = [(n, costs[n], loss) for n, (loss, _) in by_trial.items() if n in costs]
        seeds = [by_trial[n][1] for n, _, _ in pts]
        traces.append(_rung_measured_trace(rung, pts, seeds, colour, budgets[rung], axis, rung == min(means)))
        traces.append(_rung_front_trace(rung, pts, colour))
    return traces


def _target_subplots(target: float, at_target: bool) -> go.Figure:
    """Two panels side by side sharing the loss axis: the loss at T (left; without a curve to T, the top rung's,
    said so), measured at each rung (right)."""
    left = (
        f"forecast at T = {target:.3g} training FLOPs ({BAND_LEVEL:.0%} band)"
        if at_target
        else "top rung's loss, bias taken out: not a loss at T (no curve)"
    )
    return make_subplots(
        rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.05, subplot_titles=(left, "measured at each rung")
    )


def _lay_out_target(fig: go.Figure, axis: CostAxis) -> None:
    """The target figure's axes (log cost on both panels) and layout."""
    fig.update_xaxes(type="log", title_text=axis.title)
    fig.update_yaxes(title_text="validation loss (nats/token)", row=1, col=1)
    fig.update_layout(
        title=f"Front at the target budget, and the fronts measured at each rung, on {axis.short}",
        legend=dict(groupclick="toggleitem"),
        hovermode="closest",
        margin=dict(t=80),
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

    Left, from the trial rows and `nas.answer.target.predict_search`'s predictions: "front at T", the trials of
    `nas.answer.target.front_at_target(rows, predictions)` (completed, non-dominated at their predicted loss)
    joined by a step line, and "dominated at T", the other completed trials with a finite prediction; each
    with its 80% band as error bars. Right, from the search's `RungRow`s, per stored rung r (0 = the lowest
    budget C): "rung r measured", each trial's mean loss over its seeds at rung r (whatever the trial's status
    now: a rung is a finished measurement), and "rung r front", their non-dominated points as a step line.
    On the measured axis every point sits at its trial's measured seconds per token (a rung of a trial
    without one is not drawn) and every front is recomputed there.
    """
    fig = _target_subplots(target, bool(predictions) and all(p.at_target for p in predictions.values()))
    for trace in _at_target_traces(rows, predictions, target, axis):
        fig.add_trace(trace, row=1, col=1)
    for trace in _rung_traces(rung_rows, _rung_costs(rows, rung_rows, axis), axis):
        fig.add_trace(trace, row=1, col=2)
    for key in legend_keys(r for r in rows if r.status not in PENDING):
        fig.add_trace(key, row=1, col=1)
    _lay_out_target(fig, axis)
    return fig


# ---- one trial's curve out to T ---------------------------------------------------------------


def _fit_params(fit_or_params: Any, number: int) -> tuple[float, float, float, str | None]:
    if hasattr(fit_or_params, "params"):  # a nas.answer.extrapolate.StudyFit
        return fit_or_params.params(number)
    e, a, alpha, *group = fit_or_params
    return float(e), float(a), float(alpha), group[0] if group else None


def _one_trial(rung_rows: Sequence[RungRow]) -> int:
    """The trial number all of `rung_rows` belong to; ValueError when they span several trials."""
    numbers = {r.number for r in rung_rows}
    if len(numbers) != 1:
        raise ValueError(f"rung_curve_figure: needs the rungs of one trial (got trials {sorted(numbers)})")
    return numbers.pop()


def _fit_budgets(start: float, target: float, n_points: int) -> np.ndarray:
    """`n_points` budgets evenly spaced in log C from `start` to exactly `target` (just `start` if not below)."""
    xs = np.geomspace(start, target, n_points) if target > start else np.array([start])
    xs[0], xs[-1] = start, target
    return xs


def _rungs_trace(shown: Sequence[RungRow]) -> go.Scatter:
    """ "measured": one marker per rung and seed at its budget."""
    return go.Scatter(
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


def _fit_trace(xs: np.ndarray, e: float, a: float, alpha: float) -> go.Scatter:
    """ "fit L = E + A C^-α": the fitted curve at budgets `xs`, dashed."""
    return go.Scatter(
        x=xs.tolist(),
        y=(e + a * xs**-alpha).tolist(),
        name="fit L = E + A C^-α",
        mode="lines",
        line=dict(color="#7f7f7f", dash="dash"),
        hovertemplate="C %{x:.3g}<br>fitted loss %{y:.4f}<extra></extra>",
    )


def _target_point_trace(target: float, loss: float, prediction: Prediction | None) -> go.Scatter:
    """ "predicted at T": a diamond at (T, `loss`), with the band of `prediction` as error bars when given."""
    band = f" ({band_text(prediction)})" if prediction is not None else ""
    return go.Scatter(
        x=[target],
        y=[loss],
        name="predicted at T",
        mode="markers+text",
        text=["T"],
        textposition="top center",
        marker=dict(size=12, symbol="diamond", color="#d62728"),
        error_y=_band_error([prediction]) if prediction is not None else None,
        hovertemplate=f"T = {target:.3g} training FLOPs<br>predicted loss %{{y:.4f}}" + band + "<extra></extra>",
    )


def rung_curve_figure(
    rung_rows: Sequence[RungRow],
    fit_or_params: Any,
    target: float,
    prediction: Prediction | None = None,
    n_points: int = 120,
) -> go.Figure:
    """One trial's rungs and fitted curve against training FLOPs (log x), out to the target T.

    `rung_rows` are the trial's `RungRow`s (one per rung and seed: "measured", at each rung's budget);
    `fit_or_params` the search's `nas.answer.extrapolate.StudyFit` or the trial's (E, A, alpha[, group]) as
    `StudyFit.params` gives them. "fit" draws L(C) = E + A C^-alpha at `n_points` budgets spaced evenly in
    log C from the lowest rung's budget to exactly `target`; "predicted at T" marks the loss at T with the
    80% band of `prediction` (`nas.answer.target.Prediction`) as error bars, or the curve's value there, without
    a band, when no prediction is given.
    """
    number = _one_trial(rung_rows)
    e, a, alpha, group = _fit_params(fit_or_params, number)
    rung_rows = sorted(rung_rows, key=lambda r: (r.rung, r.seed))
    start = min(r.budget_flops for r in rung_rows)
    loss = prediction.loss if prediction is not None else float(e + a * target**-alpha)
    fig = go.Figure()
    fig.add_trace(_rungs_trace([r for r in rung_rows if is_finite(r.val_loss)]))
    fig.add_trace(_fit_trace(_fit_budgets(start, target, n_points), e, a, alpha))
    fig.add_trace(_target_point_trace(target, loss, prediction))
    fig.update_layout(
        title=f"Trial #{number}: loss vs training compute, out to the target"
        f"<br><sup>L = E + A C^-α with E {e:.4f}, A {a:.4g}, α {alpha:.3f} (fit {group_label(group)})</sup>",
        xaxis=dict(type="log", title="training FLOPs (C)"),
        yaxis_title="validation loss (nats/token)",
        margin=dict(t=80),
    )
    return fig


# ---- how well the fits predict ----------------------------------------------------------------


def fidelity_figure(predictions: Mapping[int, Prediction]) -> go.Figure:
    """The leave-one-out error of each trial with two or more rungs, as bars, with a line at 0.

    The error (`Prediction.loo_error`, nats/token) is the trial's top rung as predicted by a fit without that
    rung, minus the loss measured there: above 0 the fit predicted too high a loss. When no trial has two
    rungs the figure holds no bars, only a note saying so.
    """
    items = [(n, p) for n, p in sorted(predictions.items()) if p.loo_error is not None and is_finite(p.loo_error)]
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
            customdata=[[n, p.rungs, group_label(p.group)] for n, p in items],
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
