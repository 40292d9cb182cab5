"""Width advice from the width certificates of a search: does d_align grow with d_model, like for like?

The certificate (docs/design.md §4) gives each trial an effective alignment dimension d_align. A
wider model is supported when d_align grows with d_model. Across a whole search that trend is
confounded: d_align differs by orders of magnitude between residual families (cascaded near 0.05,
NAG above 100 on the same search) and moves with depth and the MoD rate, so one slope over every
trial measures which families and depths the sampler happened to pair with which widths.

So the advice compares like with like. Trials are grouped by (family, n_layers, mod_rate); within a
group only the width differs in what matters. Per family, the slope of log d_align on log d_model
is the pooled within-group (fixed-effects) least-squares slope

    slope = sum_g sum_i (x_gi - mean_g x)(y_gi - mean_g y) / sum_g sum_i (x_gi - mean_g x)^2,

x = log d_model, y = log d_align, over the groups that hold at least two distinct widths, with its
standard error from the within-group residuals (degrees of freedom: points - groups - 1). The advice
says nothing (a reason instead) when a family has fewer than `min_points` such points or fewer than
`min_points - groups - 1 >= 1` residual degrees of freedom; it says "supported" only when the slope
exceeds `flat` and lies more than two standard errors above 0 (and "not supported" symmetrically),
else that the data show no clear trend.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["FamilyWidthAdvice", "WidthPoint", "width_advice"]

FLAT = 0.1  # |slope| below this: d_align flat across widths


@dataclass(frozen=True)
class WidthPoint:
    """One trial's certificate: d_align at d_model, for an architecture of `family`, depth and MoD rate."""

    family: str
    n_layers: int
    mod_rate: float
    d_model: int
    d_align: float


@dataclass(frozen=True)
class FamilyWidthAdvice:
    """The advice for one family: `slope` (None when there is too little to go on, with `reason`)."""

    family: str
    slope: float | None
    stderr: float | None
    n_points: int  # points in groups with >= 2 widths (what the slope rests on)
    n_groups: int
    widths: tuple[int, ...]
    reason: str | None = None

    @property
    def verdict(self) -> str:
        if self.slope is None or self.stderr is None:
            return f"{self.family}: no advice ({self.reason})"
        rests = (
            f"slope {self.slope:.2f} +/- {self.stderr:.2f} from {self.n_points} trials in {self.n_groups} "
            f"group(s) of equal depth and MoD rate, widths {min(self.widths)}-{max(self.widths)}"
        )
        if self.slope > FLAT and self.slope - 2 * self.stderr > 0:
            return f"{self.family}: d_align grows with width, a wider model is supported ({rests})"
        if self.slope < -FLAT and self.slope + 2 * self.stderr < 0:
            return f"{self.family}: d_align shrinks with width, a wider model is not supported ({rests})"
        return f"{self.family}: no clear trend of d_align with width ({rests})"


def width_advice(points: Iterable[WidthPoint], *, min_points: int = 4) -> dict[str, FamilyWidthAdvice]:
    """Per family, the within-group slope of log d_align on log d_model (module docstring)."""
    groups: dict[str, dict[tuple[int, float], list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for p in points:
        if _positive(p.d_model) and _positive(p.d_align):
            groups[p.family][(p.n_layers, p.mod_rate)].append((math.log(p.d_model), math.log(p.d_align)))
    return {family: _family(family, by_group, min_points) for family, by_group in sorted(groups.items())}


def _family(family: str, by_group: dict, min_points: int) -> FamilyWidthAdvice:
    usable = [pts for pts in by_group.values() if len({x for x, _ in pts}) >= 2]
    n_points, n_groups = sum(map(len, usable)), len(usable)
    widths = tuple(sorted({round(math.exp(x)) for pts in usable for x, _ in pts}))
    if not usable:
        reason = "no two trials of equal depth and MoD rate with different widths"
        return FamilyWidthAdvice(family, None, None, 0, 0, widths, reason)
    dof = n_points - n_groups - 1
    if n_points < min_points or dof < 1:
        reason = f"{n_points} comparable trials in {n_groups} group(s), need at least {min_points} and a spare one"
        return FamilyWidthAdvice(family, None, None, n_points, n_groups, widths, reason)
    centred = []
    for pts in usable:
        mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
        centred += [(x - mx, y - my) for x, y in pts]
    sxx = sum(dx * dx for dx, _ in centred)
    sxy = sum(dx * dy for dx, dy in centred)
    slope = sxy / sxx
    sse = sum((dy - slope * dx) ** 2 for dx, dy in centred)
    return FamilyWidthAdvice(family, slope, math.sqrt(sse / dof / sxx), n_points, n_groups, widths)


def _positive(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > 0
