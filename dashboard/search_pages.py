"""The dashboard's pages about whole searches: Searches, Pareto front (the measured fronts) and Target budget
(the answer at the search's target). Each reads through `dashboard.reads` and draws figures and tables made
elsewhere."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import streamlit as st

from nas.answer.pareto import reference_point
from nas.space.budget import VALIDATED_TARGET_RATIO, Budget
from workers.status import TrialStatus

from . import reads
from .front_figures import cost_ratio_figure, hypervolume_figure, pareto_figure
from .tables import fidelity_benchmark_frame, searches_frame, target_frame, trials_frame
from .target import ladder_caption, moved_target_note, no_target_reason, target_options
from .target_figures import fidelity_figure, target_front_figure
from .widgets import (
    COSTS,
    FLOPS,
    LOSS,
    any_running,
    default_search,
    is_running,
    live,
    pick_axis,
    pick_search,
    unmeasured_caption,
)

# ---- Searches --------------------------------------------------------------------------------


def searches_page(url: str, summaries: Sequence) -> None:
    st.header("Searches")

    def render() -> None:
        current = reads.list_searches(url)
        rows = {s.name: reads.trials(url, s.name) for s in current}
        frame = searches_frame(current, {s.name: reads.get_search(url, s.name) for s in current}, rows)
        st.dataframe(
            frame,
            hide_index=True,
            key="searches_table",
            column_config={
                "trial_flops": FLOPS,
                "search_flops": FLOPS,
                "best_val_loss": LOSS,
                "hypervolume": FLOPS,
                "created": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm"),
            },
        )
        st.caption(
            "done = completed + diverged + stopped + infeasible (as `nas list`); hypervolume of each search "
            "against its own reference point: (ln V of its vocabulary, 1.1 x its largest executed FLOPs/token)."
        )

    live(render, any(is_running(s) for s in summaries))


# ---- Pareto front ----------------------------------------------------------------------------


def pareto_page(url: str, summaries: Sequence) -> None:
    st.header("Pareto front")
    names = [s.name for s in summaries]
    chosen = st.multiselect("searches", names, default=[default_search(summaries)], key="pareto_searches")
    left, right = st.columns(2)
    dominated = left.toggle("show dominated trials", value=True, key="pareto_dominated")
    infeasible = right.toggle("show infeasible / failed / diverged / stopped", value=False, key="pareto_infeasible")
    axis = pick_axis("pareto_axis")
    if not chosen:
        st.info("choose one or more searches")
        return
    rung = _pick_rung(url, chosen)
    tokenizers = {name: reads.tokenizer_spec(url, name) for name in chosen}
    bpb = st.toggle(
        "loss in bits per byte (compares tokenizers)",
        value=len(set(tokenizers.values())) > 1,
        key="pareto_bpb",
        help="nats per token stay each search's objective; bits per byte compare searches whose tokenizers differ: "
        + ", ".join(f"{n}: {t}" for n, t in tokenizers.items()),
    )

    def render() -> None:
        rows = {name: reads.rows_at_rung(reads.trials(url, name), reads.rungs(url, name), rung) for name in chosen}
        ref = reference_point([r for rs in rows.values() for r in rs])
        if not any(r.status == TrialStatus.COMPLETED for rs in rows.values() for r in rs):
            st.info("no completed trials yet: the front appears as trials complete")
        fig_col, hv_col = st.columns([3, 2])
        shown = {name: [reads.in_bits_per_byte(r) for r in rs] for name, rs in rows.items()} if bpb else rows
        fig_col.plotly_chart(
            pareto_figure(
                shown,
                show_dominated=dominated,
                show_infeasible=infeasible,
                axis=axis,
                unit="bits/byte" if bpb else "nats/token",
            ),
            key="pareto_front",
        )
        hv_col.plotly_chart(hypervolume_figure(rows, ref), key="pareto_hv")
        unmeasured_caption([r for rs in rows.values() for r in rs], axis)
        st.caption(
            f"reference point for the hypervolume (on counted FLOPs, the search's objective, whichever the x axis): "
            f"val loss {ref[0]:.4f} nats (ln {round(math.exp(ref[0]))}), executed FLOPs/token {ref[1]:.4g} "
            "(1.1 x the largest among the selected searches)"
        )
        fronts = [trials_frame(rs, axis).assign(search=name) for name, rs in rows.items()]
        front = pd.concat(fronts, ignore_index=True)
        st.subheader(f"Trials on the front ({axis.short})")
        st.dataframe(
            front[front["on_front"]] if len(front) else front,
            hide_index=True,
            key="front_table",
            column_config={"val_loss": LOSS} | COSTS,
        )
        st.caption(_rung_caption(url, chosen, rung))
        st.subheader("Measured vs counted cost")
        st.plotly_chart(cost_ratio_figure(rows), key="pareto_cost_ratio")
        st.caption(
            "each config's training-step seconds per token over its executed FLOPs per token, divided by the "
            "median of its search: 2 means twice as slow per counted FLOP as the search's middle config. Times are "
            "measured on the worker that ran each trial (the store records no device name)."
        )

    live(render, any_running(summaries, chosen))


def _pick_rung(url: str, names: Sequence[str]) -> int | None:
    """The ladder rung at which the measured fronts compare trials (rung 0 by default: every trial has it)."""
    budgets = [b for b in (reads.budget(url, n) for n in names) if isinstance(b, Budget)]
    rungs = max((b.rungs for b in budgets), default=1)
    if rungs < 2:
        return reads.TOP_REACHED
    labels = {**{f"rung {k}": k for k in range(rungs)}, "top rung each reached (mixes budgets)": reads.TOP_REACHED}
    return labels[st.radio("measured at", list(labels), index=0, horizontal=True, key="pareto_rung")]


def _rung_caption(url: str, names: Sequence[str], rung: int | None) -> str:
    """What the measured losses on this page are, and where the answer at the target is."""
    where = "the front at the search's target budget, predicted from the rungs, is on the Target budget page"
    if rung is reads.TOP_REACHED:
        return f"each trial's loss at the top rung it reached: trials promoted further trained longer; {where}"
    text = f"each trial's loss measured at rung {rung} (trials that never reached it are left out); {where}"
    if any(isinstance(b, Budget) and b.ladder_kind == "replica" for b in (reads.budget(url, n) for n in names)):
        text += (
            ". On a replica ladder a rung's loss is that of the trial's replica (a narrower copy at the target's "
            "tokens per parameter), so raw losses rank the replicas, not the configs"
        )
    return text


# ---- Target budget ---------------------------------------------------------------------------


def _pick_target(budget: Budget) -> float:
    options = target_options(budget)
    return st.select_slider(
        "target T (training FLOPs)",
        options=options,
        value=budget.ladder.target_flops,
        format_func=lambda t: f"{t:.3g} ({t / budget.ladder.top_flops:.3g}x top rung)",
        key="target_T",
        help=f"move T within the range make fidelity checked (up to {VALIDATED_TARGET_RATIO:g}x the top rung)",
    )


def _curve_to_target(url: str, name: str, budget: Budget) -> bool:
    """Whether the search's answer carries its losses to T by a curve (then T may move, and the points with it)."""
    found = reads.search_answer(url, name, budget.ladder.target_flops).answer
    return found is not None and found.at_target


def target_page(url: str, summaries: Sequence) -> None:
    st.header("Target budget")
    name = pick_search(summaries, "target_search")
    axis = pick_axis("target_axis")
    stored = reads.budget(url, name)
    movable = isinstance(stored, Budget) and _curve_to_target(url, name, stored)
    target = _pick_target(stored) if isinstance(stored, Budget) and movable else None
    if isinstance(stored, Budget) and stored.ladder.kind != "single" and not movable:
        st.info("T cannot move: no curve carries this search's top rungs to a target (its losses are the top "
                "rungs', bias taken out); a search with level configs (--level-configs) has one")  # fmt: skip

    def render() -> None:
        budget = reads.budget(url, name)
        rung_rows = reads.rungs(url, name)
        if isinstance(budget, Budget) and target is not None:
            budget = budget.model_copy(update={"target_flops": target})
        predictions = (
            reads.predictions(url, name, budget.ladder.target_flops) if rung_rows and isinstance(budget, Budget) else {}
        )
        reason = no_target_reason(budget, rung_rows, predictions)
        if reason is not None:
            st.info(reason)
            return
        found = reads.search_answer(url, name, budget.ladder.target_flops)
        rows, answer = list(found.rows), reads.answer(url, name, budget.ladder.target_flops)
        st.caption(ladder_caption(budget, answer.backtest, answer.calibration))
        if target is not None and isinstance(stored, Budget) and target != stored.ladder.target_flops:
            st.caption(moved_target_note(budget))
        st.plotly_chart(
            target_front_figure(rows, predictions, budget.ladder.target_flops, rung_rows, axis), key="target_front"
        )
        unmeasured_caption(rows, axis)
        st.subheader("What the answer rests on")
        st.markdown("\n".join(f"- {line}" for line in found.rests_on))  # as nas show and the export say it
        st.subheader("Trials at the target")
        st.dataframe(
            target_frame(rows, predictions, axis),
            hide_index=True,
            key="target_table",
            column_config={col: LOSS for col in ("val_loss", "loss_at_T", "band_low", "band_high", "loo_error")}
            | COSTS,
        )
        st.caption("val_loss: measured at the top rung the trial reached; loss_at_T: predicted at the target")
        st.subheader("Fidelity: leave-one-out")
        st.plotly_chart(fidelity_figure(predictions), key="target_fidelity")
        st.caption(
            "for each trial with two or more rungs: its top rung predicted by a fit without that rung, minus the "
            "loss measured there (how well lower rungs foretell a higher one)"
        )
        benchmark = reads.fidelity_benchmark()
        if benchmark is not None:
            st.subheader("Fidelity benchmark (make fidelity)")
            st.dataframe(fidelity_benchmark_frame(benchmark), hide_index=True, key="fidelity_benchmark")
            st.caption(
                f"fixed configs on {len(benchmark['headline'])} corpora ({', '.join(benchmark['headline'])}), "
                f"searched on the default replica ladder ({benchmark['default_layout']}) and answered at T, against "
                "the same configs trained at T: how far an answer at the target can be trusted"
            )

    live(render, any_running(summaries, [name]))
