"""The dashboard's shared encodings and texts: how a trial looks on every plot, and how its numbers read.

Colour is the residual family (`FAMILY_COLOURS`, `family_colour`), marker symbol the Mixture-of-Depths rate
(`MOD_SYMBOLS`, `mod_symbol`), and each search of an overlay gets its own outline colour and front line dash
(`search_style`); `legend_keys` draws legend-only entries that explain the first two. `format_number`,
`group_label` and `trial_hover` are the texts of hovers and tables. Pure functions; no Streamlit, no store.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import plotly.graph_objects as go

from nas.answer.extrapolate import NONE, STUDY

from .cost import seconds_per_token

__all__ = [
    "FAMILY_COLOURS",
    "MOD_SYMBOLS",
    "OTHER_COLOUR",
    "family_colour",
    "format_number",
    "group_label",
    "is_finite",
    "legend_keys",
    "mod_bin",
    "mod_symbol",
    "search_style",
    "trial_hover",
    "trial_lr",
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


def family_colour(residual: str | None) -> str:
    return FAMILY_COLOURS.get(residual or "", OTHER_COLOUR)


def mod_bin(rate: float | None) -> tuple[str, str]:
    """(symbol, legend label) of the `MOD_SYMBOLS` bin holding a MoD rate (None counts as dense, 0)."""
    rate = 0.0 if rate is None else float(rate)
    return next((symbol, label) for edge, symbol, label in MOD_SYMBOLS if rate <= edge)


def mod_symbol(rate: float | None) -> str:
    """Marker symbol of a MoD rate: circle for dense (0), then square, diamond, triangle, star."""
    return mod_bin(rate)[0]


def search_style(index: int) -> tuple[str, str]:
    """(line colour, dash) of the `index`-th search of an overlay."""
    return SEARCH_LINE_COLOURS[index % len(SEARCH_LINE_COLOURS)], SEARCH_DASHES[index % len(SEARCH_DASHES)]


def legend_keys(rows: Iterable) -> list[go.Scatter]:
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
    bins = sorted({mod_bin(r.mod_rate) for r in rows}, key=lambda b: [s for _, s, _ in MOD_SYMBOLS].index(b[0]))
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


def is_finite(x: Any) -> bool:
    """A real number (int or float) that is neither None, inf nor NaN."""
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def trial_lr(row) -> float | None:
    """The trial's learning rate: what ran (config["optim"]) or else what was sampled (flat config)."""
    optim = row.config.get("optim") if isinstance(row.config.get("optim"), dict) else {}
    lr = optim.get("lr", row.config.get("lr"))
    return float(lr) if is_finite(lr) else None


def format_number(x: Any, spec: str) -> str:
    """`x` in `spec`, "-" for None and "inf"/"-inf" for an infinite float (hover texts, metrics)."""
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return "inf" if x > 0 else "-inf"
    return format(x, spec)


def group_label(group: str | None) -> str:
    """A fit group in words (`nas.answer.extrapolate`: a family, the whole study, or no fit)."""
    return {STUDY: "shared by the study", NONE: "no fit", "-": "no fit", None: "-"}.get(group, f"family {group}")


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
