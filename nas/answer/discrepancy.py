"""The top rung's bias against the target, and how the answer takes it out: a prior measured across corpora,
updated by anchors where the search trains them.

A replica rung judges a target through a narrower copy of it, and its error against the target run is not noise
alone. On `make fidelity`'s corpora it follows the family (the replica favours cascaded over NAG and ANCRe) and the
target's aspect z = ln(n_layers / d_model) (deep, narrow targets are judged too poorly), and both vanish at the
target's own width. The model, a linear discrepancy in the spirit of Kennedy and O'Hagan (2000), with s a rung's
distance from the target:

    L_r(x) = L_T(x) + c_r + s_r (beta z(x) + phi_family(x)),      s_r = ln(d_T / d_r)  (0 at d_T)

so a prediction resting on a rung at distance s is corrected by -s (beta (z - z0) + phi_family), z0 the study's
mean aspect (a shift shared by every trial changes no ranking: the study's curve carries the level).

**The prior** (`BiasPrior`): beta and phi per unit of s, measured on the fidelity corpora (the top rung, T/10, at
d_T/2, against the truth at T, the size trend removed; `benchmarks.trust.forecast_constants` fits it, holding each
corpus out in turn), with sds from how much the corpora disagree; it is the bias part of the error model a search
uses (`nas.answer.error_model.measured_model`) unless told not to (`--bias-prior none`).

**Anchors**: trials trained once more at a fidelity C_a above the top rung C_top, nearer the target's shape. Their
two measurements differ by y = L_a - L_top = (c_a - c_top) - (s_top - s_a) (beta z + phi): after the prior's
family offsets are taken out, a line in x = -(s_top - s_a) z whose slope is beta. A Gaussian conjugate fit (its
noise the study's seed noise of one rung measurement, twice over) moves beta from the prior toward what the anchors
show: with no anchor it is the prior; with two close or noisy ones it stays near it; with anchors far apart in z it
follows them. Each difference's variance is twice the seed noise's plus the prior's misfit (a config's own error
that no line in z explains), so that a few anchors do not take their own quirks for the slope. The family
offsets stay the prior's (a few anchors cannot pin them). beta's sd carries into each correction's, and so into
the prediction's band. Anchors are chosen for leverage on beta: among the contenders
(the better half of the trials), the extremes of z, alternately the deepest-narrowest and the shallowest-widest.
An anchor is informative only if it is unbiased where the top rung is biased: `benchmarks/results/anchors.json`
measures that the target's own shape at T/3 (a third of its tokens) is not, so a search trains none by default.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_PRIOR_SD",
    "NO_PRIOR",
    "Anchor",
    "Anchoring",
    "BiasPrior",
    "Discrepancy",
    "Distance",
    "anchor_points",
    "aspect",
    "choose_anchors",
    "compute_distance",
    "fit_discrepancy",
    "narrowing_distance",
    "width_distance",
]

DEFAULT_PRIOR_SD = 0.05  # beta's sd when nothing is known: nats per unit of z per unit of narrowing distance


def aspect(n_layers: int, d_model: int) -> float:
    """z = ln(depth / width) of a target."""
    return math.log(n_layers / d_model)


def narrowing_distance(target_width: int, replica_width: int) -> float:
    """s = ln(d_T / d_r): how far a replica rung is from its target's shape (0 at the target's width)."""
    return math.log(target_width / replica_width)


@dataclass(frozen=True)
class BiasPrior:
    """The top rung's bias per unit of narrowing distance: beta (nats per unit of z) with its sd, each family's
    offset (nats; a family it does not name: 0) with its spread across the corpora (`family_sd`), and where it was
    measured."""

    beta: float = 0.0
    beta_sd: float = DEFAULT_PRIOR_SD
    family: Mapping[str, float] = field(default_factory=dict)
    source: str = "none"
    misfit: float = 0.0  # sd of a config's top-rung error that the model leaves (beyond size, family and z)
    family_sd: Mapping[str, float] = field(default_factory=dict)

    def applied_family(self, family: str) -> float:
        """The offset applied for `family`: m m^2 / (m^2 + d^2), the offset m shrunk as far as the corpora disagree
        on it (d its spread across them); whole without a measured spread."""
        m, d = self.family.get(family, 0.0), self.family_sd.get(family, 0.0)
        return m if m == 0.0 or d == 0.0 else m * m * m / (m * m + d * d)

    def describe(self) -> str:
        offsets = ", ".join(
            f"{f} {v:+.3f}" + (f" ± {self.family_sd[f]:.3f}" if self.family_sd.get(f) else "")
            for f, v in sorted(self.family.items())
        )
        return f"beta {self.beta:+.3f} ± {self.beta_sd:.3f}" + (f", family offsets {offsets}" if offsets else "")


NO_PRIOR = BiasPrior()


@dataclass(frozen=True)
class Anchor:
    """One anchor: trial `trial` of aspect `z` and family `family`, measured at the top rung (`top_loss`, narrowing
    distance `top_s`) and at the anchor's fidelity (`anchor_loss`, distance `anchor_s`)."""

    trial: int
    z: float
    top_loss: float
    anchor_loss: float
    top_s: float
    anchor_s: float
    family: str = ""

    @property
    def difference(self) -> float:
        return self.anchor_loss - self.top_loss

    @property
    def span(self) -> float:
        return self.top_s - self.anchor_s


@dataclass(frozen=True)
class Discrepancy:
    """beta (with its sd) and the family offsets the answer takes out, per unit of narrowing distance, around the
    aspect `centre`; the anchors they rest on beside the prior."""

    beta: float
    beta_sd: float
    family: Mapping[str, float]
    centre: float
    prior: BiasPrior
    anchors: tuple[Anchor, ...] = ()

    def correction(self, z: float, family: str, s: float) -> tuple[float, float]:
        """What to add to a measurement at narrowing distance `s` of a target of aspect `z` and `family`, and its
        sd."""
        bias = self.beta * (z - self.centre) + self.family.get(family, 0.0)
        return -s * bias, s * self.beta_sd * abs(z - self.centre)

    def describe(self) -> str:
        """One line: what was corrected and by how much (per ln 2 of narrowing: a replica at half the width)."""
        half = math.log(2.0)
        offsets = ", ".join(f"{f} {half * v:+.3f}" for f, v in sorted(self.family.items()))
        what = (
            f"the top rung's error taken out: {half * self.beta:+.3f} ± {half * self.beta_sd:.3f} nats per unit of "
            f"ln(depth/width)" + (f" and family offsets {offsets} nats" if offsets else "") + " at half the width"
        )
        if self.anchors:
            trials = ", ".join(str(a.trial) for a in self.anchors)
            basis = f"the prior ({self.prior.source}) moved by {len(self.anchors)} anchors (trials {trials})"
        else:
            basis = f"the prior measured on {self.prior.source}, no anchors"
        return f"{what}; from {basis}"


def choose_anchors(aspects: Mapping[int, float], losses: Mapping[int, float], count: int) -> list[int]:
    """`count` trials for leverage on beta: among the contenders (the better half by `losses`, at least `count`
    trials), the extremes of z, taken alternately from the deep-narrow and the shallow-wide end."""
    finite = sorted((t for t in aspects if t in losses and math.isfinite(losses[t])), key=lambda t: (losses[t], t))
    contenders = finite[: max(count, math.ceil(len(finite) / 2))]
    by_z = sorted(contenders, key=lambda t: (aspects[t], t))
    chosen: list[int] = []
    while by_z and len(chosen) < count:
        chosen.append(by_z.pop(-1 if len(chosen) % 2 == 0 else 0))
    return chosen


def fit_discrepancy(
    anchors: Sequence[Anchor], noise: float, prior: BiasPrior = NO_PRIOR, centre: float | None = None
) -> Discrepancy:
    """beta from the prior moved by the anchors (module docstring); `noise`: the sd of one rung measurement (the
    study's seed noise); `centre`: the aspect corrections are taken around (default: the anchors' mean, else 0)."""
    usable = [a for a in anchors if a.span > 0]
    zs = [a.z for a in usable]
    middle = centre if centre is not None else (sum(zs) / len(zs) if zs else 0.0)
    if len(usable) < 2:
        sd = prior.beta_sd if prior != NO_PRIOR else 0.0  # no prior, no anchors: nothing corrected, nothing added
        return Discrepancy(prior.beta, sd, _applied(prior), middle, prior, tuple(usable))
    xs = [-a.span * a.z for a in usable]
    ys = [a.difference + a.span * prior.applied_family(a.family) for a in usable]  # the prior's family part out
    x_bar, y_bar = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - x_bar) ** 2 for x in xs)
    sxy = sum((x - x_bar) * (y - y_bar) for x, y in zip(xs, ys, strict=True))
    variance = 2.0 * max(noise, 1e-6) ** 2 + prior.misfit**2  # two measurements, and what the model leaves
    precision = sxx / variance + 1.0 / prior.beta_sd**2
    beta = (sxy / variance + prior.beta / prior.beta_sd**2) / precision
    return Discrepancy(beta, math.sqrt(1.0 / precision), _applied(prior), middle, prior, tuple(usable))


def _applied(prior: BiasPrior) -> dict[str, float]:
    """Each family's offset as the prior applies it (`BiasPrior.applied_family`)."""
    return {f: prior.applied_family(f) for f in prior.family}


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
    families: Mapping[int, str] | None = None,
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
        family = (families or {}).get(trial) or (budgets[top][0].residual or "")
        out.append(
            Anchor(
                trial,
                aspect(layers, width),
                _mean(budgets[top]),
                _mean(high),
                distance(budgets[top][0], width),
                distance(high[0], width),
                family,
            )
        )
    return out


def _mean(rows: Sequence[Any]) -> float:
    return sum(r.val_loss for r in rows) / len(rows)


def _budget_key(flops: float) -> float:
    return float(f"{flops:.6g}")


@dataclass(frozen=True)
class Anchoring:
    """What the answer needs to take the top rung's bias out: each trial's target shape (n_layers, d_model) and
    family, the layout's top rung (budgets above it are anchors), the prior, how a rung's distance from the target
    is read, and the noise of one rung measurement when the study has measured none (`fallback_noise`)."""

    shapes: Mapping[int, tuple[int, int]]
    families: Mapping[int, str]
    top_rung_flops: float
    prior: BiasPrior = NO_PRIOR
    distance: Distance = width_distance
    fallback_noise: float = 0.02

    def fit(self, rows: Sequence[Any], noise: float | None) -> Discrepancy:
        """The discrepancy the prior and the anchors among `rows` give."""
        points = anchor_points(rows, self.shapes, self.top_rung_flops, self.distance, self.families)
        centre = sum(aspect(*s) for s in self.shapes.values()) / len(self.shapes) if self.shapes else 0.0
        return fit_discrepancy(points, noise if noise else self.fallback_noise, self.prior, centre)

    def corrections(self, rows: Sequence[Any], discrepancy: Discrepancy) -> dict[int, tuple[float, float]]:
        """Each trial's correction (mean, sd) for the rung its prediction rests on: its highest budget."""
        highest: dict[int, Any] = {}
        for r in rows:
            if r.number in self.shapes and (r.number not in highest or r.budget_flops > highest[r.number].budget_flops):
                highest[r.number] = r
        return {
            t: discrepancy.correction(
                aspect(*self.shapes[t]), self.families.get(t, ""), self.distance(r, self.shapes[t][1])
            )
            for t, r in highest.items()
        }
