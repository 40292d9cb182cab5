"""Anchors: the bias of the search's top rung against the target, measured inside the search and taken out.

A replica rung judges a target through a narrower copy of it, and its error against the target run is not
noise alone: it grows with the target's aspect z = ln(n_layers / d_model) (deep, narrow configs are judged too
poorly; `benchmarks/results/replica_bias.json`). A few *anchors*, trials trained once more at a fidelity C_a
above the top rung C_top (a wider replica, nearer the target's shape), measure it. The model, a linear
discrepancy in the spirit of Kennedy and O'Hagan (2000), with `s` a rung's distance from the target:

    L_r(x) = L_T(x) + c_r + beta * z(x) * s_r,      s_r = ln(d_T / d_r)  (the replica's narrowing, 0 at d_T)

so that an anchor's two measurements differ by y = L_a - L_top = (c_a - c_top) + beta * z * (s_a - s_top): a
line in z whose slope b = beta (s_a - s_top) the anchors fit (intercept free). A trial whose prediction rests on a
rung at distance s_r is corrected by -beta z s_r = b z s_r / (s_top - s_a), relative to the anchors' mean aspect
(a shift shared by every trial changes no ranking; it is the level the study's curve already carries).

The slope is shrunk toward zero (prior sd `prior_sd`) in a Gaussian conjugate fit whose noise is the study's
seed noise of one rung measurement, twice over (two measurements per anchor): with no anchor it is zero, with
two close ones it stays small, with anchors far apart in z it follows them. Its standard deviation carries into
each correction's, and so into the prediction's band.

Anchors are chosen for leverage on that slope: among the contenders (the trials whose top rung is within the
better half), the extremes of z, alternately the deepest-narrowest and the shallowest-widest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_PRIOR_SD",
    "Anchor",
    "Discrepancy",
    "Anchoring",
    "Distance",
    "anchor_points",
    "aspect",
    "choose_anchors",
    "compute_distance",
    "fit_discrepancy",
    "narrowing_distance",
    "width_distance",
]

# Prior sd of the slope b, nats per unit of z; b is beta (s_a - s_top), and beta was 0.03-0.04 nats per unit of
# z per ln 2 of narrowing at the top rung on the two method corpora (`benchmarks/results/anchors.json`)
DEFAULT_PRIOR_SD = 0.05


def aspect(n_layers: int, d_model: int) -> float:
    """z = ln(depth / width) of a target."""
    return math.log(n_layers / d_model)


def narrowing_distance(target_width: int, replica_width: int) -> float:
    """s = ln(d_T / d_r): how far a replica rung is from its target's shape (0 at the target's width)."""
    return math.log(target_width / replica_width)


@dataclass(frozen=True)
class Anchor:
    """One anchor: trial `trial` of aspect `z`, measured at the top rung (`top_loss`, narrowing distance `top_s`)
    and at the anchor's fidelity (`anchor_loss`, distance `anchor_s`)."""

    trial: int
    z: float
    top_loss: float
    anchor_loss: float
    top_s: float
    anchor_s: float

    @property
    def difference(self) -> float:
        return self.anchor_loss - self.top_loss


@dataclass(frozen=True)
class Discrepancy:
    """The fitted slope `slope` (b, nats per unit of z, with its sd `slope_sd`) of the anchors' difference in z,
    the mean distance between top rung and anchor (`span` = s_top - s_a), the anchors' mean aspect (`centre`) and
    the anchors it rests on."""

    slope: float
    slope_sd: float
    span: float
    centre: float
    anchors: tuple[Anchor, ...] = ()

    @property
    def beta(self) -> float:
        """beta: the error per unit of z per unit of narrowing distance (0 without anchors)."""
        return -self.slope / self.span if self.span > 0 else 0.0

    def correction(self, z: float, s: float) -> tuple[float, float]:
        """What to add to a measurement at narrowing distance `s` of a target of aspect `z`, and its sd."""
        if not self.anchors or self.span <= 0:
            return 0.0, 0.0
        carry = s / self.span * (z - self.centre)
        return self.slope * carry, self.slope_sd * abs(carry)

    def describe(self) -> str:
        """One line: what was corrected and by how much."""
        if not self.anchors:
            return "no anchors: the top rung's bias in depth over width is not corrected"
        trials = ", ".join(str(a.trial) for a in self.anchors)
        if self.span <= 0:
            return f"anchors (trials {trials}) no nearer the target than the top rung: nothing corrected"
        slope, sd = self.top_rung_slope
        return (
            f"{len(self.anchors)} anchors (trials {trials}): the top rung's error grows by {slope:+.3f} ± {sd:.3f} "
            "nats per unit of ln(depth/width); taken out of every prediction"
        )

    @property
    def top_rung_slope(self) -> tuple[float, float]:
        """The slope of the top rung's error against the target in z, and its sd: beta s_top (the anchors' mean)."""
        if not self.anchors or self.span <= 0:
            return 0.0, 0.0
        carry = sum(a.top_s for a in self.anchors) / len(self.anchors) / self.span
        return -self.slope * carry, self.slope_sd * carry


def choose_anchors(aspects: Mapping[int, float], losses: Mapping[int, float], count: int) -> list[int]:
    """`count` trials for leverage on the slope in z: among the contenders (the better half by `losses`, at least
    `count` trials), the extremes of z, taken alternately from the deep-narrow and the shallow-wide end."""
    finite = sorted((t for t in aspects if t in losses and math.isfinite(losses[t])), key=lambda t: (losses[t], t))
    contenders = finite[: max(count, math.ceil(len(finite) / 2))]
    by_z = sorted(contenders, key=lambda t: (aspects[t], t))
    chosen: list[int] = []
    while by_z and len(chosen) < count:
        chosen.append(by_z.pop(-1 if len(chosen) % 2 == 0 else 0))
    return chosen


def fit_discrepancy(anchors: Sequence[Anchor], noise: float, prior_sd: float = DEFAULT_PRIOR_SD) -> Discrepancy:
    """The slope of the anchors' differences in z (intercept free), shrunk toward 0 (module docstring). `noise`:
    the sd of one rung measurement (the study's seed noise)."""
    if len(anchors) < 2:
        return Discrepancy(0.0, prior_sd, 0.0, 0.0, tuple(anchors))
    zs = [a.z for a in anchors]
    centre = sum(zs) / len(zs)
    ys = [a.difference for a in anchors]
    y_bar = sum(ys) / len(ys)
    szz = sum((z - centre) ** 2 for z in zs)
    szy = sum((z - centre) * (y - y_bar) for z, y in zip(zs, ys, strict=True))
    variance = 2.0 * max(noise, 1e-6) ** 2  # two measurements per difference
    precision = szz / variance + 1.0 / prior_sd**2
    slope = (szy / variance) / precision
    span = sum(a.top_s - a.anchor_s for a in anchors) / len(anchors)
    return Discrepancy(slope, math.sqrt(1.0 / precision), span, centre, tuple(anchors))


Distance = Callable[[Any, int], float]  # (a rung row, the target's width) -> s


def width_distance(row: Any, target_width: int) -> float:
    """s = ln(d_T / d_r) of a rung row: the replica's narrowing (0 on a budget ladder: the target's own width)."""
    return narrowing_distance(target_width, row.d_model) if row.d_model else 0.0


def compute_distance(target_flops: float) -> Distance:
    """s = ln(T / C_r) of a rung row: how far its budget is below the target's."""
    return lambda row, _width: math.log(target_flops / row.budget_flops)


def anchor_points(
    rows: Sequence[Any],
    shapes: Mapping[int, tuple[int, int]],
    top_rung_flops: float,
    distance: Distance = width_distance,
) -> list[Anchor]:
    """The anchors among a search's rung rows (`nas.store.RungRow`): the trials measured at a budget above the top
    rung `top_rung_flops`, each with its mean loss over seeds at the top rung and at its highest budget, and those
    rungs' distances from the target. `shapes`: each trial's target (n_layers, d_model)."""
    by_trial: dict[int, dict[float, list]] = {}
    for r in rows:
        if r.val_loss is not None and math.isfinite(r.val_loss) and r.number in shapes:
            by_trial.setdefault(r.number, {}).setdefault(_budget_key(r.budget_flops), []).append(r)
    top = _budget_key(top_rung_flops)
    out = []
    for trial, budgets in sorted(by_trial.items()):
        above = [b for b in budgets if b > top]
        if not above or top not in budgets:
            continue
        layers, width = shapes[trial]
        high = budgets[max(above)]
        out.append(
            Anchor(
                trial,
                aspect(layers, width),
                _mean(budgets[top]),
                _mean(high),
                distance(budgets[top][0], width),
                distance(high[0], width),
            )
        )
    return out


def _mean(rows: Sequence[Any]) -> float:
    return sum(r.val_loss for r in rows) / len(rows)


def _budget_key(flops: float) -> float:
    return float(f"{flops:.6g}")


@dataclass(frozen=True)
class Anchoring:
    """What the answer needs to take the anchors' discrepancy out: each trial's target shape (n_layers, d_model),
    the layout's top rung (budgets above it are anchors), how a rung's distance from the target is read, the
    slope's prior sd, and the noise of one rung measurement when the study has measured none (`fallback_noise`)."""

    shapes: Mapping[int, tuple[int, int]]
    top_rung_flops: float
    distance: Distance = width_distance
    prior_sd: float = DEFAULT_PRIOR_SD
    fallback_noise: float = 0.02

    def fit(self, rows: Sequence[Any], noise: float | None) -> Discrepancy:
        """The discrepancy the anchors among `rows` support (zero without two of them)."""
        points = anchor_points(rows, self.shapes, self.top_rung_flops, self.distance)
        return fit_discrepancy(points, noise if noise else self.fallback_noise, self.prior_sd)

    def corrections(self, rows: Sequence[Any], discrepancy: Discrepancy) -> dict[int, tuple[float, float]]:
        """Each trial's correction (mean, sd) for the rung its prediction rests on: its highest budget."""
        highest: dict[int, Any] = {}
        for r in rows:
            if r.number in self.shapes and (r.number not in highest or r.budget_flops > highest[r.number].budget_flops):
                highest[r.number] = r
        return {
            t: discrepancy.correction(aspect(*self.shapes[t]), self.distance(r, self.shapes[t][1]))
            for t, r in highest.items()
        }
