"""The Knob effects page: what the search learned about each knob at the target (`nas.answer.effects`), the same
answer as `nas effects`.

Two figures, pure functions of the effects and the trials: each knob term's effect on the loss at T for its step
with its 80% interval as error bars (resolved terms in colour, the others grey), and the partial dependence of the
loss at T on depth, width and MoD rate per residual family (the fit at equal shape, every other term at its
trials' mean).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from nas.answer.effects import AT_EQUAL, Effects, Knob, Observation, knobs_of, partial_dependence
from nas.answer.search_effects import observations
from nas.space import SpaceError, space_from_dict, to_optuna_distributions
from nas.space.budget import Budget

from . import reads
from .style import family_colour
from .widgets import any_running, live, pick_search

PARTIAL_KNOBS = ("n_layers", "d_model", "mod_rate")  # depth, width, MoD rate


def effects_figure(effects: Effects) -> go.Figure:
    """Each estimated term's effect (nats at T for its step) with its 80% interval; resolved ones in colour."""
    shown = [e for e in effects.effects if e.effect is not None]
    fig = go.Figure()
    for resolved, colour in ((True, "#1f77b4"), (False, "#aaaaaa")):
        group = [e for e in shown if e.resolved == resolved]
        fig.add_trace(
            go.Scatter(
                x=[e.effect for e in group],
                y=[f"{e.knob}: {e.step}" for e in group],
                mode="markers",
                marker={"color": colour, "size": 9},
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "array": [e.high - e.effect for e in group],
                    "arrayminus": [e.effect - e.low for e in group],
                },
                name="resolved" if resolved else "not resolved",
                hovertext=[e.reason or "resolved" for e in group],
            )
        )
    fig.add_vline(x=0.0, line_dash="dash", line_color="black")
    fig.update_layout(
        xaxis_title=f"effect on the loss at T (nats; negative is better), at equal {AT_EQUAL[effects.at_equal]}",
        height=120 + 40 * len(shown),
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
    )
    return fig


def partial_dependence_figure(rows: Sequence[Observation], knobs: Sequence[Knob]) -> go.Figure:
    """The loss at T along depth, width and MoD rate, one line per residual family (`partial_dependence`)."""
    searched = [k for k in PARTIAL_KNOBS if any(knob.name == k for knob in knobs)]
    family = next((k for k in knobs if k.name == "residual"), None)
    levels = list(family.levels) if family is not None else [None]
    fig = make_subplots(rows=1, cols=max(1, len(searched)), shared_yaxes=True, subplot_titles=searched)
    for col, name in enumerate(searched, start=1):
        for i, level in enumerate(levels):
            curve = partial_dependence(rows, knobs, name, None if i == 0 else level)
            if not curve:
                continue
            fig.add_trace(
                go.Scatter(
                    x=[x for x, _ in curve],
                    y=[y for _, y in curve],
                    mode="lines",
                    name=str(level),
                    line={"color": family_colour(str(level))},
                    legendgroup=str(level),
                    showlegend=col == 1,
                ),
                row=1,
                col=col,
            )
        fig.update_xaxes(type="log" if name != "mod_rate" else "linear", title_text=name, row=1, col=col)
    fig.update_yaxes(title_text="loss at T (nats)", row=1, col=1)
    fig.update_layout(height=380, margin={"l": 10, "r": 10, "t": 40, "b": 10})
    return fig


def effects_frame(effects: Effects) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "knob": e.knob,
                "step": e.step,
                "effect": e.effect,
                "low_80": e.low,
                "high_80": e.high,
                "importance": e.importance,
                "resolved": "yes" if e.resolved else e.reason,
            }
            for e in effects.effects
        ]
    )


@st.cache_data(ttl=reads.TTL_S, show_spinner=False)
def search_effects_at(url: str, name: str, target: float, at_equal: str) -> tuple[Effects, list, list] | str:
    """(the search's Effects, its Observations, its Knobs) at `target`, or why there are none."""
    from nas.answer.search_effects import search_effects

    try:
        distributions = to_optuna_distributions(space_from_dict(reads.get_search(url, name).space))
    except SpaceError as err:
        return f"its stored space cannot be read ({err})"
    rows, answer = reads.trials(url, name), reads.answer(url, name, target)
    completed = [r for r in rows if str(r.status) == "completed" and r.executed_flops_per_token]
    flops = {r.number: float(r.executed_flops_per_token) for r in completed}
    found = observations(completed, answer, flops, {}, list(distributions))
    return search_effects(rows, answer, distributions, at_equal), found, knobs_of(distributions)


def effects_page(url: str, summaries: Sequence) -> None:
    st.header("Knob effects")
    name = pick_search(summaries, "effects_search")
    at_equal = st.radio("at equal", ["flops", "params"], horizontal=True, key="effects_at_equal",
                        format_func=lambda k: AT_EQUAL[k])  # fmt: skip

    def render() -> None:
        budget = reads.budget(url, name)
        if not isinstance(budget, Budget) or not reads.rungs(url, name):
            st.info("no loss at T to read effects from: the search has no measured rungs, or no readable budget")
            return
        result = search_effects_at(url, name, budget.ladder.target_flops, at_equal)
        if isinstance(result, str):
            st.info(f"no effects: {result}")
            return
        effects, rows, knobs = result
        st.caption(
            f"{effects.trials} trials at T = {budget.ladder.target_flops:.3g} FLOPs; 80% bootstrap intervals "
            "(trials resampled, "
            f"each prediction perturbed within its band); importance: {effects.evaluator}"
        )
        st.plotly_chart(effects_figure(effects), key="effects_plot")
        for line in effects.sentences():
            st.markdown(f"- {line}")
        st.dataframe(effects_frame(effects), hide_index=True, key="effects_table")
        st.subheader("Partial dependence at T, per family")
        st.plotly_chart(partial_dependence_figure(rows, knobs), key="effects_partial")
        st.caption("the fit at equal shape: each other knob at its trials' mean; one line per residual family")

    live(render, any_running(summaries, [name]))
