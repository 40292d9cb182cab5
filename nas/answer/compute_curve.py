"""What the compute buys: for the share of T each trial trains at, what `make fidelity` measured at that share.

`make fidelity` replays a search with every config once at T/90, T/40, T/30, T/20 and T/10 on each corpus and
grades it against the configs trained at T (`benchmarks.trust.fidelity.compute_curve`): the share of the decisions
at matched cost the truth resolves that the answer orders right, the share of the calls it resolves that are right,
and the median half-width of its 80% bands. Its summary ships as package data (`compute_curve.json`, written by
`python -m benchmarks.trust.fidelity report`); `nas search --dry-run` and the layout line quote it for the share a
search plans (`quote`): the measured share nearest in log (within a factor 1.5), or, outside the shares measured,
that it was not measured.
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources

__all__ = ["CURVE_FILE", "curve", "quote"]

CURVE_FILE = "compute_curve.json"
NEAREST = 1.5  # a planned share within this factor of a measured one is quoted at it


@cache
def curve() -> dict[str, dict[str, dict]]:
    """The shipped curve: corpus -> "T/k" -> its figures (empty when the package has none)."""
    path = resources.files("nas.answer").joinpath(CURVE_FILE)
    return json.loads(path.read_text()) if path.is_file() else {}


def _percent(x) -> str:
    return "-" if x is None else f"{x:.0%}"


def quote(share: float) -> str:
    """One line: what `make fidelity` measured at the share of T per trial nearest `share`, per corpus."""
    measured = {key: figures["share_of_target"] for c in curve().values() for key, figures in c.items()}
    if not measured:
        return "what this compute buys: not measured (no compute curve shipped)"
    key, nearest = min(measured.items(), key=lambda kv: abs(math.log(share / kv[1])))
    if share < min(measured.values()) / NEAREST:
        return (
            f"what this compute buys: T/{1 / share:.0f} per trial is below the lowest share make fidelity measured "
            f"(T/{1 / min(measured.values()):.0f}): not measured"
        )
    if share > max(measured.values()) * NEAREST:
        return (
            f"what this compute buys: T/{1 / share:.0f} per trial is above the highest share make fidelity measured "
            f"(T/{1 / max(measured.values()):.0f}): not measured"
        )
    if abs(math.log(share / nearest)) > math.log(NEAREST):
        return f"what this compute buys: T/{1 / share:.0f} per trial lies between the shares make fidelity measured"
    per = {name: c[key] for name, c in curve().items() if key in c}
    decisions = " / ".join(_percent(f["decision_accuracy"]) for f in per.values())
    calls = " / ".join(_percent(f["resolved_call_accuracy"]) for f in per.values())
    widths = " / ".join("-" if f["band_half_width"] is None else f"{f['band_half_width']:.3f}" for f in per.values())
    return (
        f"what this compute buys (make fidelity at {key} per trial, {' / '.join(per)}): decisions right {decisions}, "
        f"resolved calls right {calls}, 80% band half-width {widths} nats"
    )
