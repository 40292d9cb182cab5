"""What the dashboard's pages share: the table columns' formats, the search and axis pickers, and `live`, which
redraws a page's contents every `REFRESH_S` seconds while a search it shows is running."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import streamlit as st

from nas.store import SearchStatus

from . import reads
from .cost import AXES, AXIS_HELP, MEASURED, CostAxis, unmeasured_note

FLOPS = st.column_config.NumberColumn(format="%.3e")
LOSS = st.column_config.NumberColumn(format="%.4f")
COSTS = {
    "executed_flops_per_token": FLOPS,
    "kv_bytes_per_token": st.column_config.NumberColumn(
        format="%.4g", help="KV-cache bytes per context token, counted at the config's seq_len"
    ),
    "decode_flops_per_token": FLOPS,
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


def default_search(summaries: Sequence) -> str:
    """The newest search with a completed trial, else the newest."""
    done = [s for s in summaries if s.completed > 0]
    return (done or list(summaries))[-1].name


def pick_search(summaries: Sequence, key: str) -> str:
    names = [s.name for s in summaries]
    return st.selectbox("search", names, index=names.index(default_search(summaries)), key=key)


def any_running(summaries: Sequence, names: Sequence[str]) -> bool:
    return any(is_running(s) for s in summaries if s.name in names)


def pick_axis(key: str) -> CostAxis:
    """The fronts' x-axis: counted executed FLOPs per token (default), KV-cache bytes or decode FLOPs per token,
    or measured seconds per token."""
    return AXES[st.radio("x axis", list(AXES), index=0, horizontal=True, key=key, help=AXIS_HELP)]


def unmeasured_caption(rows: Sequence, axis: CostAxis) -> None:
    """On the measured axis, how many finished trials have no measured speed and so are not drawn."""
    note = unmeasured_note(rows) if axis is MEASURED else None
    if note:
        st.caption(note)
