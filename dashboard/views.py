"""The dashboard's pages: each reads through `dashboard.reads` (the store's read API) and draws its figures and tables.

Selections (searches, trial, filters) are widgets drawn once per script run; what they show is
drawn by a `render` closure, which `live` turns into a fragment that Streamlit reruns every
`REFRESH_S` seconds while the search is running, so the page updates without reloading.
(This module is not named `pages`: Streamlit would take a `pages/` folder beside app.py for
its own multipage navigation.) One file because the pages share their widgets' keys and the
session state; each page is one function, the figures and tables they draw live elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pandas as pd
import streamlit as st

from dashboard.width_advice import WidthPoint, width_advice
from nas.answer.extrapolate import NONE
from nas.answer.pareto import pareto_rows, reference_point
from nas.space.budget import VALIDATED_TARGET_RATIO, Budget
from nas.store import SearchStatus
from workers.status import PENDING, TrialStatus

from . import reads
from .bundle import export_bundle
from .cost import AXES, AXIS_HELP, COUNTED, CostAxis, unmeasured_note
from .front_figures import cost_ratio_figure, hypervolume_figure, pareto_figure
from .style import format_number
from .tables import fidelity_benchmark_frame, searches_frame, target_frame, trials_frame
from .target import ladder_caption, moved_target_note, no_target_reason, target_options
from .target_figures import band_text, fidelity_figure, rung_curve_figure, target_front_figure
from .trial_figures import (
    ancre_heatmap,
    loss_curve_figure,
    nag_figure,
    residual_norm_figure,
    skip_rate_figure,
    width_figure,
)

FLOPS = st.column_config.NumberColumn(format="%.3e")
LOSS = st.column_config.NumberColumn(format="%.4f")
COSTS = {
    "executed_flops_per_token": FLOPS,
    "measured_s_per_token": st.column_config.NumberColumn(
        format="%.3e", help="training-step seconds per token, on the worker that ran the trial"
    ),
    "cost_ratio": st.column_config.NumberColumn(
        format="%.2f",
        help="(measured s/token) / (executed FLOPs/token), over the median of the search: above 1, slower than "
        "its counted FLOPs say",
    ),
}


def is_running(summary) -> bool:
    return summary.status == SearchStatus.RUNNING or summary.running > 0


def live(render: Callable[[], None], running: bool) -> None:
    """Draw `render` once, or, while running, as a fragment rerun every REFRESH_S seconds (no page reload)."""
    if running:
        st.caption(f"live: a search shown here is running; refreshing every {reads.REFRESH_S:g} s")
        st.fragment(run_every=reads.REFRESH_S)(render)()
    else:
        render()


def _default_search(summaries: Sequence) -> str:
    """The newest search with a completed trial, else the newest."""
    done = [s for s in summaries if s.completed > 0]
    return (done or list(summaries))[-1].name


def _pick_search(summaries: Sequence, key: str) -> str:
    names = [s.name for s in summaries]
    return st.selectbox("search", names, index=names.index(_default_search(summaries)), key=key)


def _running(summaries: Sequence, names: Sequence[str]) -> bool:
    return any(is_running(s) for s in summaries if s.name in names)


def _pick_axis(key: str) -> CostAxis:
    """The fronts' x-axis: counted executed FLOPs per token (default) or measured seconds per token."""
    return AXES[st.radio("x axis", list(AXES), index=0, horizontal=True, key=key, help=AXIS_HELP)]


def _unmeasured_caption(rows: Sequence, axis: CostAxis) -> None:
    """On the measured axis, how many finished trials have no measured speed and so are not drawn."""
    note = unmeasured_note(rows) if axis is not COUNTED else None
    if note:
        st.caption(note)


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
    chosen = st.multiselect("searches", names, default=[_default_search(summaries)], key="pareto_searches")
    left, right = st.columns(2)
    dominated = left.toggle("show dominated trials", value=True, key="pareto_dominated")
    infeasible = right.toggle("show infeasible / failed / diverged / stopped", value=False, key="pareto_infeasible")
    axis = _pick_axis("pareto_axis")
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
        _unmeasured_caption([r for rs in rows.values() for r in rs], axis)
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

    live(render, _running(summaries, chosen))


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
    if any(isinstance(b, Budget) and b.ladder == "replica" for b in (reads.budget(url, n) for n in names)):
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
        value=budget.target,
        format_func=lambda t: f"{t:.3g} ({t / budget.top_rung_flops:.3g}x top rung)",
        key="target_T",
        help=f"move T within the range make fidelity checked (up to {VALIDATED_TARGET_RATIO:g}x the top rung)",
    )


def target_page(url: str, summaries: Sequence) -> None:
    st.header("Target budget")
    name = _pick_search(summaries, "target_search")
    axis = _pick_axis("target_axis")
    stored = reads.budget(url, name)
    target = _pick_target(stored) if isinstance(stored, Budget) and stored.rungs > 1 else None

    def render() -> None:
        budget = reads.budget(url, name)
        rung_rows = reads.rungs(url, name)
        if isinstance(budget, Budget) and target is not None:
            budget = budget.model_copy(update={"target_flops": target})
        predictions = reads.predictions(url, name, budget.target) if rung_rows and isinstance(budget, Budget) else {}
        reason = no_target_reason(budget, rung_rows, predictions)
        if reason is not None:
            st.info(reason)
            return
        rows = reads.trials(url, name)
        answer = reads.answer(url, name, budget.target)
        st.caption(ladder_caption(budget, answer.backtest, answer.calibration))
        if target is not None and isinstance(stored, Budget) and target != stored.target:
            st.caption(moved_target_note(budget))
        st.plotly_chart(target_front_figure(rows, predictions, budget.target, rung_rows, axis), key="target_front")
        _unmeasured_caption(rows, axis)
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

    live(render, _running(summaries, [name]))


# ---- Trial detail ----------------------------------------------------------------------------


def trial_page(url: str, summaries: Sequence) -> None:
    st.header("Trial detail")
    name = _pick_search(summaries, "detail_search")
    rows = reads.trials(url, name)
    if not rows:
        st.info("this search has no trials yet")
        return
    labels = {r.number: f"#{r.number} · {r.residual or '-'} · {r.status}" for r in rows}
    number = st.selectbox("trial", list(labels), format_func=labels.get, key="detail_trial")

    def render() -> None:
        row = next((r for r in reads.trials(url, name) if r.number == number), None)
        if row is None:
            st.warning(f"trial {number} is gone")
            return
        _trial_summary(row)
        _trial_rungs(url, name, row)
        _trial_results(url, row)

    live(render, next(r for r in rows if r.number == number).status in PENDING)


def _trial_summary(row) -> None:
    st.subheader(f"trial #{row.number}: {row.status}")
    if row.failure_reason:
        (st.error if row.status == TrialStatus.FAILED else st.warning)(row.failure_reason)
    for earlier in row.previous_attempts or []:
        st.caption(f"attempt {earlier.get('attempt')}: {earlier.get('status')} - {earlier.get('failure_reason') or ''}")
    cols = st.columns(5)
    cols[0].metric("val loss (nats)", format_number(row.val_loss, ".4f"))
    cols[1].metric("bits/byte", format_number(row.val_bpb, ".3f"))
    cols[2].metric("executed FLOPs/token", format_number(row.executed_flops_per_token, ".3g"))
    cols[3].metric("tokens seen", format_number(row.tokens_seen, ",d"))
    cols[4].metric("wall time (s)", format_number(row.wall_time_s, ".1f"))
    st.caption(
        f"residual {row.residual} · {row.n_layers} layers · d_model {row.d_model} · {row.n_heads} heads · "
        f"mod_rate {row.mod_rate} · attempt {row.attempt}"
    )
    with st.expander("config", expanded=False):
        st.json(row.config)


def _trial_rungs(url: str, name: str, row) -> None:
    """The trial's rungs and fitted curve out to the target, or one line saying why there is none."""
    rung_rows = reads.rungs(url, name)
    mine = [r for r in rung_rows if r.number == row.number]
    budget = reads.budget(url, name)
    if not rung_rows or isinstance(budget, str):
        st.caption(no_target_reason(budget, rung_rows, {}))
        return
    if not mine:
        st.caption("no rung measured for this trial: no prediction at the target budget")
        return
    predictions = reads.predictions(url, name, budget.target)
    p = predictions.get(row.number)
    params = reads.fit_params(url, name, budget.target).get(row.number)
    if p is None or params is None or p.group in (NONE, "-"):
        st.caption(
            f"measured at {len({r.rung for r in mine})} rung(s); "
            + (no_target_reason(budget, rung_rows, predictions) or "no finite loss at any rung: nothing to fit")
        )
        return
    st.subheader("loss vs compute, out to the target")
    st.plotly_chart(rung_curve_figure(mine, params, budget.target, p), key=f"rung_curve_{row.id}")
    loo = "-" if p.loo_error is None else f"{p.loo_error:+.4f}"
    st.caption(
        f"predicted at T = {budget.target:.3g} training FLOPs: {p.loss:.4f} nats ({band_text(p)}) · "
        f"{p.rungs} of {budget.rungs} rungs · {p.predictor}: {p.basis} · held-out error of its highest rung {loo}"
    )
    st.dataframe(rung_frame(mine), hide_index=True, key=f"rung_table_{row.id}", column_config=COSTS)
    if any(r.d_model is not None for r in mine):
        st.caption(
            "each rung trained a replica: this architecture at width d_model, for the target's tokens per "
            "parameter (up to the width grid's rounding); on_path False: the narrowest width, at fewer tokens"
        )


def rung_frame(rungs) -> pd.DataFrame:
    """A trial's rung rows: budget, loss, and on a replica ladder the replica's width and tokens per parameter."""
    columns = ["rung", "seed", "budget_flops", "val_loss", "tokens", "d_model", "params", "tokens_per_param"]
    columns += ["target_tokens_per_param", "on_path"]
    return pd.DataFrame([{c: getattr(r, c) for c in columns} for r in rungs], columns=columns)


def _trial_results(url: str, row) -> None:
    curve = reads.curve(url, row.id)
    if curve:
        st.plotly_chart(loss_curve_figure(curve))
    diag = reads.diagnostics(url, row.id) or {}
    panels = [
        (title, build)
        for title, present, build in (
            ("ANCRe connectivity", bool(diag.get("ancre_p")), lambda: ancre_heatmap(diag["ancre_p"])),
            ("NAG rotation", bool(diag.get("nag_angle") or diag.get("nag_gate")), lambda: nag_figure(diag)),
            ("MoD skip rates", bool(diag.get("skip_rate")), lambda: skip_rate_figure(diag, row.mod_rate)),
            ("residual norms", bool(diag.get("residual_rms")), lambda: residual_norm_figure(diag)),
        )
        if present
    ]
    for tab, (_, build) in zip(st.tabs([title for title, _ in panels]) if panels else [], panels, strict=False):
        tab.plotly_chart(build())
    cert = reads.width(url, row.id)
    if cert is not None:
        st.subheader("width certificate")
        st.dataframe(pd.DataFrame([cert]), hide_index=True, key=f"width_{row.id}")
    if not (curve or panels or cert):
        st.info("no results stored for this trial yet")


# ---- Width view ------------------------------------------------------------------------------


def width_page(url: str, summaries: Sequence) -> None:
    st.header("Width view")
    names = [s.name for s in summaries]
    chosen = st.multiselect("searches", names, default=names, key="width_searches")

    def render() -> None:
        pairs = [pair for name in chosen for pair in reads.widths(url, name)]
        if not pairs:
            st.info("no width certificates among the completed trials of these searches")
            return
        st.plotly_chart(width_figure(pairs))
        st.markdown(_width_advice(pairs))
        frame = pd.DataFrame(
            [{"number": r.number, "residual": r.residual, "mod_rate": r.mod_rate, **w} for r, w in pairs]
        )
        st.dataframe(frame, hide_index=True, key="width_table")

    live(render, _running(summaries, chosen))


def _width_advice(pairs) -> str:
    """One line per family, from trials of equal depth and MoD rate only (`dashboard.width_advice`)."""
    points = [
        WidthPoint(r.residual or "unknown", r.n_layers or 0, r.mod_rate or 0.0, w.get("d_model"), w.get("d_align"))
        for r, w in pairs
    ]
    n_seq = {w.get("n_sequences") for _, w in pairs}
    caveat = (
        "" if len(n_seq) == 1 else "\n\nCertificates use different numbers of held-out sequences R: compare at equal R."
    )
    lines = [advice.verdict for advice in width_advice(points).values()] or [
        "no width certificate with a finite d_align"
    ]
    return "\n".join(f"- {line}" for line in lines) + caveat


# ---- Trial table -----------------------------------------------------------------------------


def table_page(url: str, summaries: Sequence) -> None:
    st.header("Trial table")
    name = _pick_search(summaries, "table_search")
    frame = trials_frame(reads.trials(url, name))
    cols = st.columns(3)
    residual = cols[0].multiselect("residual", _options(frame, "residual"), key="table_residual")
    status = cols[1].multiselect("status", _options(frame, "status"), key="table_status")
    mod_rate = cols[2].multiselect("mod_rate", _options(frame, "mod_rate"), key="table_mod_rate")
    cols = st.columns(2)
    sort_by = cols[0].selectbox("sort by", list(frame.columns), index=0, key="table_sort")
    descending = cols[1].toggle("descending", value=False, key="table_descending")

    def render() -> None:
        table = trials_frame(reads.trials(url, name))
        for column, wanted in (("residual", residual), ("status", status), ("mod_rate", mod_rate)):
            if wanted:
                table = table[table[column].isin(wanted)]
        if sort_by in table.columns:
            table = table.sort_values(sort_by, ascending=not descending, na_position="last", kind="stable")
        st.dataframe(
            table,
            hide_index=True,
            key="trial_table",
            column_config={"val_loss": LOSS} | COSTS,
        )
        st.caption(f"{len(table)} of {len(frame)} trials")
        st.download_button(
            "download CSV",
            table.to_csv(index=False).encode(),
            file_name=f"{name}_trials.csv",
            mime="text/csv",
            on_click="ignore",
            key="table_csv",
        )

    live(render, _running(summaries, [name]))


def _options(frame: pd.DataFrame, column: str) -> list:
    return sorted(frame[column].dropna().unique().tolist()) if column in frame else []


# ---- Export ----------------------------------------------------------------------------------


def export_page(url: str, summaries: Sequence) -> None:
    st.header("Export")
    name = _pick_search(summaries, "export_search")
    rows = [r for r in reads.trials(url, name) if r.status == TrialStatus.COMPLETED]
    front = [r.number for r in pareto_rows(rows)]
    numbers = st.multiselect(
        "trials (default: the Pareto front)", [r.number for r in rows], default=front, key=f"export_trials:{name}"
    )
    if st.button("build YAML bundle", key="export_build", disabled=not numbers):
        try:
            st.session_state["export_bundle"] = (name, tuple(numbers), export_bundle(reads.store(url), name, numbers))
        except Exception as err:  # the exporter's own errors, shown rather than crashing the page
            st.error(f"export failed: {err}")
    built = st.session_state.get("export_bundle")
    if built and built[:2] == (name, tuple(numbers)):
        st.download_button(
            "download zip",
            built[2],
            file_name=f"{name}_configs.zip",
            mime="application/zip",
            on_click="ignore",
            key="export_download",
        )


PAGES = {
    "Searches": searches_page,
    "Pareto front": pareto_page,
    "Target budget": target_page,
    "Trial detail": trial_page,
    "Width view": width_page,
    "Trial table": table_page,
    "Export": export_page,
}
