"""The dashboard's pages about trials: Trial detail (one trial's results, rungs and fit out to the target),
Width view (width certificates), Trial table (filter, sort, download) and Export (a YAML bundle of chosen
trials). Each reads through `dashboard.reads` and draws figures and tables made elsewhere."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

import pandas as pd
import streamlit as st

from dashboard.width_advice import WidthPoint, width_advice
from nas.answer.extrapolate import NONE
from nas.answer.pareto import pareto_rows
from workers.status import PENDING, TrialStatus

from . import reads
from .bundle import export_bundle
from .style import format_number
from .tables import trials_frame
from .target import no_target_reason
from .target_figures import band_text, loss_label, rung_curve_figure
from .trial_figures import (
    ancre_heatmap,
    loss_curve_figure,
    nag_figure,
    residual_norm_figure,
    skip_rate_figure,
    width_figure,
)
from .widgets import (
    COSTS,
    LOSS,
    any_running,
    live,
    pick_search,
)

# ---- Trial detail ----------------------------------------------------------------------------


def trial_page(url: str, summaries: Sequence) -> None:
    st.header("Trial detail")
    name = pick_search(summaries, "detail_search")
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
    predictions = reads.predictions(url, name, budget.ladder.target_flops)
    p = predictions.get(row.number)
    params = reads.fit_params(url, name, budget.ladder.target_flops).get(row.number)
    if p is None or params is None or p.group in (NONE, "-"):
        st.caption(
            f"measured at {len({r.rung for r in mine})} rung(s); "
            + (no_target_reason(budget, rung_rows, predictions) or "no finite loss at any rung: nothing to fit")
        )
        return
    st.subheader("loss vs compute, out to the target")
    st.plotly_chart(rung_curve_figure(mine, params, budget.ladder.target_flops, p), key=f"rung_curve_{row.id}")
    loo = "-" if p.loo_error is None else f"{p.loo_error:+.4f}"
    st.caption(
        f"{loss_label(p, budget.ladder.target_flops)} training FLOPs: {p.loss:.4f} nats ({band_text(p)}) · "
        f"{p.rungs} of {budget.ladder.layout.rungs} rungs · {p.predictor}: {p.basis} · held-out error of its highest "
        f"rung {loo}"
    )
    st.dataframe(rung_frame(mine), hide_index=True, key=f"rung_table_{row.id}", column_config=COSTS)
    if any(r.is_replica for r in mine):
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
        st.dataframe(pd.DataFrame([asdict(cert)]), hide_index=True, key=f"width_{row.id}")
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
            [{"number": r.number, "residual": r.residual, "mod_rate": r.mod_rate, **asdict(w)} for r, w in pairs]
        )
        st.dataframe(frame, hide_index=True, key="width_table")

    live(render, any_running(summaries, chosen))


def _width_advice(pairs) -> str:
    """One line per family, from trials of equal depth and MoD rate only (`dashboard.width_advice`)."""
    points = [
        WidthPoint(r.residual or "unknown", r.n_layers or 0, r.mod_rate or 0.0, w.d_model, w.d_align) for r, w in pairs
    ]
    n_seq = {w.n_sequences for _, w in pairs}
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
    name = pick_search(summaries, "table_search")
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

    live(render, any_running(summaries, [name]))


def _options(frame: pd.DataFrame, column: str) -> list:
    return sorted(frame[column].dropna().unique().tolist()) if column in frame else []


# ---- Export ----------------------------------------------------------------------------------


def export_page(url: str, summaries: Sequence) -> None:
    st.header("Export")
    name = pick_search(summaries, "export_search")
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
