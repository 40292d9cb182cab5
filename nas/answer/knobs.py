"""Each searched knob as a regression reads it (`nas.answer.effects`): its scale, the trials it acts in, its design
columns, and whether the search varied it enough for an effect to be resolved.

A categorical knob (residual family, MoD granularity) is indicators of each level against a reference level
(cascaded, sublayer, else the space's first choice); a numeric knob is in log scale when it is a size or a rate that
acts multiplicatively (depth, width, heads, MLP ratio, learning rate, ANCRe temperature, or log-sampled in the
space), linear otherwise. A knob that acts only under another (ANCRe's temperature under ancre, the MoD period and
granularity under a MoD rate above 0) is its encoding centred over the trials where it acts, times that condition.
An effect needs at least `MIN_PER_LEVEL` trials at each of two levels (two trials of a level cannot support an
interval).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "AT_EQUAL",
    "CONDITIONS",
    "MIN_PER_LEVEL",
    "SHAPE",
    "Effect",
    "Knob",
    "Observation",
    "acts_in",
    "knob_terms",
    "knobs_of",
]

AT_EQUAL = {"flops": "FLOPs per token", "params": "parameters", "shape": "shape"}  # what a fit holds fixed

MIN_PER_LEVEL = 3  # trials a level needs for an effect against it to be resolved (two cannot support an interval)
LOG_KNOBS = ("n_layers", "d_model", "n_heads", "mlp_ratio", "lr", "ancre_tau")
REFERENCE = {"residual": "cascaded", "mod_granularity": "sublayer"}
SHAPE = ("n_layers", "d_model")  # at equal size, the first of these searched enters; the other follows from size
CONDITIONS = {  # knob -> (the knob it acts under, the condition on that knob's value)
    "ancre_tau": ("residual", lambda v: v == "ancre"),
    "mod_every": ("mod_rate", lambda v: float(v or 0.0) > 0.0),
    "mod_granularity": ("mod_rate", lambda v: float(v or 0.0) > 0.0),
}


@dataclass(frozen=True)
class Knob:
    """A searched knob: `levels` (a categorical's choices, the first the reference) or a numeric range
    (`low`, `high`) read in log scale or linearly."""

    name: str
    scale: str  # "levels", "log" or "linear"
    levels: tuple = ()
    low: float = 0.0
    high: float = 0.0
    continuous: bool = False  # a float range: its values are binned before counting levels

    def encode(self, value) -> float:
        return math.log(float(value)) if self.scale == "log" else float(value)


@dataclass(frozen=True)
class Observation:
    """One trial as the effects read it: its sampled knob values, predicted loss at T and that prediction's sd
    (None: unknown), its executed FLOPs per token and parameters (None: not counted; only a fit at equal
    parameters reads them)."""

    knobs: Mapping[str, object]
    loss: float
    sd: float | None
    flops: float
    params: float | None = None


@dataclass(frozen=True)
class Effect:
    """One term's effect on the loss at T for its `step`, with its 80% interval; `reason` says why it is not
    resolved ("" when it is)."""

    knob: str
    step: str
    effect: float | None
    low: float | None
    high: float | None
    reason: str = ""
    importance: float | None = None
    level: str | None = None  # a categorical level's name, against `reference`
    reference: str | None = None
    rests_on: str = ""  # the trials it is read from, e.g. "12 nag and 9 cascaded trials"

    @property
    def resolved(self) -> bool:
        return not self.reason

    def sentence(self, at_equal: str) -> str:
        """The effect in words, e.g. 'at T, ancre beats cascaded by 0.020 [0.010, 0.030] nats at equal FLOPs per
        token'."""
        size = f"at equal {AT_EQUAL[at_equal]}"
        gain, lo, hi = -(self.effect or 0.0), -(self.high or 0.0), -(self.low or 0.0)
        if self.level is not None:
            verb = "beats" if gain > 0 else "trails"
            subject = f"{self.level} {verb} {self.reference}"
        else:
            verb = "lowers" if gain > 0 else "raises"
            doubling = self.step.startswith("x2")
            change = f"doubling {self.knob}{self.step[2:]}" if doubling else f"{self.knob} {self.step}"
            subject = f"{change} {verb} the loss"
        if gain < 0:
            gain, lo, hi = -gain, -hi, -lo
        basis = f" (from {self.rests_on})" if self.rests_on else ""
        return f"at T, {subject} by {gain:.3f} [{lo:.3f}, {hi:.3f}] nats {size}{basis}"

    def as_dict(self) -> dict:
        keys = ("knob", "step", "effect", "low", "high", "reason", "importance", "level", "reference", "rests_on")
        return {k: getattr(self, k) for k in keys} | {"resolved": self.resolved}


def knobs_of(distributions: Mapping[str, object]) -> list[Knob]:
    """The space's searched knobs (Optuna distributions by name) as Knobs (module docstring: their scales)."""
    out = []
    for name, d in distributions.items():
        choices = tuple(getattr(d, "choices", ()))
        if choices and not all(isinstance(c, int | float) and not isinstance(c, bool) for c in choices):
            reference = REFERENCE.get(name, choices[0])
            levels = (reference, *(c for c in choices if c != reference)) if reference in choices else choices
            out.append(Knob(name, "levels", levels))
            continue
        low, high = (min(choices), max(choices)) if choices else (d.low, d.high)
        log = (getattr(d, "log", False) or name in LOG_KNOBS) and low > 0
        continuous = not choices and getattr(d, "step", None) is None
        out.append(Knob(name, "log" if log else "linear", choices, float(low), float(high), continuous))
    return out


def acts_in(knob: Knob, obs: Observation) -> bool:
    """Whether `knob` acts in the trial `obs` (its condition on another knob holds, `CONDITIONS`)."""
    if knob.name not in CONDITIONS:
        return True
    parent, holds = CONDITIONS[knob.name]
    return parent not in obs.knobs or bool(holds(obs.knobs[parent]))


def knob_terms(knob: Knob, rows: Sequence[Observation]) -> list[tuple[Effect, np.ndarray, str]]:
    """The knob's design columns, each with its (unfitted) Effect and the reason it is not identified by how the
    search varied it ("" when it is)."""
    active = np.array([acts_in(knob, o) and knob.name in o.knobs for o in rows])
    if knob.scale == "levels":
        values = [o.knobs.get(knob.name) for o in rows]
        reference = knob.levels[0]
        out = []
        for level in knob.levels[1:]:
            column = np.array([float(a and v == level) for a, v in zip(active, values, strict=True)])
            counts = [sum(a and v == x for a, v in zip(active, values, strict=True)) for x in (reference, level)]
            reason = (
                ""
                if min(counts) >= MIN_PER_LEVEL
                else (
                    f"too few trials of a level ({counts[1]} {level}, {counts[0]} {reference}): an interval "
                    f"needs at least {MIN_PER_LEVEL} of each"
                )
            )
            step = f"{level} vs {reference}"
            basis = f"{counts[1]} {level} and {counts[0]} {reference} trials"
            out.append((Effect(knob.name, step, None, None, None, level=str(level), reference=str(reference),
                               rests_on=basis), column, reason))  # fmt: skip
        return out
    encoded = np.array([knob.encode(o.knobs[knob.name]) if a else 0.0 for a, o in zip(active, rows, strict=True)])
    if active.any():
        encoded = np.where(active, encoded - encoded[active].mean(), 0.0)
    step = "x2" if knob.scale == "log" else f"{knob.low:g} -> {knob.high:g}"
    values = {o.knobs[knob.name] for a, o in zip(active, rows, strict=True) if a}
    basis = f"{int(active.sum())} trials over {len(values)} values"
    return [(Effect(knob.name, step, None, None, None, rests_on=basis), encoded, _varied(knob, rows, active))]


def _varied(knob: Knob, rows: Sequence[Observation], active: np.ndarray) -> str:
    """ "" when the search set the knob to at least 2 levels with at least MIN_PER_LEVEL trials each (a float
    knob's values binned in quarters of its searched range), else why not."""
    values = [knob.encode(o.knobs[knob.name]) for a, o in zip(active, rows, strict=True) if a]
    lo, hi = knob.encode(knob.low), knob.encode(knob.high)
    if knob.continuous and hi > lo:
        values = [min(3, int(4 * (v - lo) / (hi - lo))) for v in values]
    counts = {v: values.count(v) for v in set(values)}
    if sum(c >= MIN_PER_LEVEL for c in counts.values()) >= 2:
        return ""
    if len(counts) <= 1:
        return "held constant"
    per_value = "/".join(str(c) for c in sorted(counts.values(), reverse=True))
    return (
        f"too few trials per value ({per_value} trials over {len(counts)} values): an interval needs at least "
        f"{MIN_PER_LEVEL} trials at each of two values"
    )
