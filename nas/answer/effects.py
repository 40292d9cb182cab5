"""What a search learned about each knob: its signed effect on the predicted loss at the target T, at matched cost,
with an 80% interval, and its importance.

**The estimator: weighted least squares with size as a covariate.** Each completed trial i gives y_i, its predicted
loss at T (`nas.answer.target`), and s_i, that prediction's standard deviation: half its calibrated 80% band over
z = 1.2816 (the band is central, `BAND_LEVEL`), or without a band the study's seed noise carried to T
(`Answer.noise_at_target`). The model is

    y_i = b0 + g(x_i) + sum_k beta_k z_ik + e_i,    Var(e_i) = s_i^2 + tau^2

- x_i, the size held fixed: ln of executed FLOPs per token (`at_equal="flops"`) or ln parameters (`"params"`),
  g(x) = c1 x + c2 x^2 (the size trend of `nas.answer.decisions.size_trend`, in the same variable).
- z_ik, the knobs' encodings (`nas.answer.knobs.knob_terms`): a categorical knob as indicators of each level
  against a reference level, a numeric knob in log scale where it acts multiplicatively, linear otherwise
  (`nas.answer.knobs` says which, and how a knob that acts only under another is encoded).
- At equal size the shape has one free dimension: depth enters and width is left out (it follows from size and
  depth), so depth's effect is "deeper and narrower at the same cost", the depth-vs-width decision.
- tau^2, the scatter the knobs and the size trend do not explain, by moments: the mean squared residual of an
  unweighted fit less the mean s_i^2 (at least 0). The weights 1 / (s_i^2 + tau^2) then trust a trial with a
  tight band more without letting one tight band outweigh the misfit every trial shares.

A term's effect is beta_k times its step: a level against the reference, x2 for a log knob (beta ln 2), the
searched range's low to high for a linear one (MoD rate 0 -> its searched maximum). Negative is better: the step
lowers the loss at T.

Why a regression and not a GP posterior: a search has tens of trials over up to a dozen knobs; a linear model in
the knobs' natural scales answers "what does this knob do, other things equal" in one number per knob with an
interval a bootstrap can carry, where a GP's answer is a surface whose marginal effect depends on where it is read.

**The interval** (80%) is a bootstrap (`BOOTSTRAP` draws) that carries both sources of error: each draw resamples
the trials with replacement (the search's sampling of the space) and perturbs each y_i by N(0, s_i^2) (its
prediction's own uncertainty), refits, and takes the draws' 10th and 90th percentiles of each effect.

**Not resolved** is a term the search barely varied (fewer than 2 levels with at least `MIN_PER_LEVEL` (3) trials
each: two trials of a level cannot support an interval; a float knob's values are binned in quarters of its
searched range), one collinear with size (R^2 of its encoding on the
size trend above `COLLINEAR`) or with the other terms (the design is then rank-deficient in it), one whose
interval spans zero, or one with too few trials for the fit (fewer than twice its coefficients). With fewer trials
than the joint fit needs, each knob is fitted alone with size: the others then act as scatter, which the bootstrap
carries, since the search sampled them independently of it.

**Importance** (`nas.answer.search_effects`) comes from Optuna's own evaluators on the same trials; it ranks knobs
by how much of the spread of the loss at T they explain, unsigned and not at matched cost: beside the effects, not
instead of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .knobs import AT_EQUAL, SHAPE, Effect, Knob, Observation, acts_in, knob_terms, knobs_of

__all__ = [
    "AT_EQUAL",
    "BOOTSTRAP",
    "COLLINEAR",
    "Effect",
    "Effects",
    "Knob",
    "Observation",
    "estimate_effects",
    "knob_terms",
    "knobs_of",
    "partial_dependence",
]

BOOTSTRAP = 400  # bootstrap draws of each interval
COLLINEAR = 0.999  # R^2 of a term on the size trend (or on the other terms) above which it is not identified


@dataclass(frozen=True)
class Effects:
    """Every term's Effect at T, holding `at_equal` fixed, from `trials` trials; `evaluator` names Optuna's
    importance evaluator."""

    at_equal: str
    target: float | None
    trials: int
    effects: list[Effect]
    evaluator: str = ""
    notes: list[str] = field(default_factory=list)

    def sentences(self) -> list[str]:
        return [e.sentence(self.at_equal) for e in self.effects if e.resolved]

    def as_dict(self) -> dict:
        return {
            "at_equal": self.at_equal,
            "target_flops": self.target,
            "trials": self.trials,
            "interval": "80% bootstrap (trials resampled, each prediction perturbed within its band)",
            "importance_evaluator": self.evaluator,
            "effects": [e.as_dict() for e in self.effects],
            "in_words": self.sentences(),
            "notes": self.notes,
        }


def _size_columns(rows: Sequence[Observation], at_equal: str) -> np.ndarray:
    """The size trend's columns, c1 x + c2 x^2 with x centred (none at equal shape)."""
    if at_equal == "shape":
        return np.zeros((len(rows), 0))
    x = np.log([o.flops if at_equal == "flops" else o.params for o in rows])
    x = x - x.mean()
    return np.column_stack([x, x**2])


def _r2(column: np.ndarray, others: np.ndarray) -> float:
    """R^2 of `column` on an intercept and `others` (1.0 for a constant column)."""
    centred = column - column.mean()
    total = float(centred @ centred)
    if total <= 1e-12 * max(1.0, float(column @ column)):
        return 1.0
    design = np.column_stack([np.ones(len(column)), others])
    fitted = design @ np.linalg.lstsq(design, column, rcond=None)[0]
    return 1.0 - float(np.sum((column - fitted) ** 2)) / total


def _identified(terms: list, size: np.ndarray) -> list:
    """The terms with their reasons, collinear ones marked: with size first, then with the other terms kept."""
    out = []
    for effect, column, reason in terms:
        if not reason and size.shape[1] and _r2(column, size) > COLLINEAR:
            reason = f"collinear with size (R^2 {_r2(column, size):.4f})"
        out.append((effect, column, reason))
    for i, (effect, column, reason) in enumerate(out):
        if reason:
            continue
        kept = [c for j, (_, c, r) in enumerate(out) if j != i and not r]
        if _r2(column, np.column_stack([size, *kept]) if kept else size) > COLLINEAR:
            out[i] = (effect, column, "collinear with size and the other knobs (rank-deficient)")
    return out


def _lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`np.linalg.lstsq(a, b, rcond=None)[0]` over any leading batch axes, a (..., n, m), b (..., n): the
    minimum-norm solution from a's SVD, singular values at or below eps max(n, m) times the largest taken as 0
    (lstsq's rule)."""
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    kept = s > np.finfo(s.dtype).eps * max(a.shape[-2:]) * s[..., :1]
    inverse = np.divide(1.0, s, out=np.zeros_like(s), where=kept)
    return np.einsum("...ij,...i->...j", vt, inverse * np.einsum("...ni,...n->...i", u, b))


def _wls(design: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted least squares over any leading batch axes: design (..., n, m), y and weights (..., n)."""
    root = np.sqrt(weights)
    return _lstsq(design * root[..., None], y * root)


def _fit_weights(design: np.ndarray, y: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """1 / (s_i^2 + tau^2), tau^2 by moments from an unweighted fit (module docstring); batched as `_wls`."""
    residual = y - np.einsum("...nm,...m->...n", design, _lstsq(design, y))
    dof = max(1, design.shape[-2] - design.shape[-1])
    tau2 = np.maximum(0.0, np.einsum("...n,...n->...", residual, residual) / dof - np.mean(sd**2, axis=-1))
    return 1.0 / np.maximum(sd**2 + tau2[..., None], 1e-12)


def _scale(effect: Effect, knob: Knob) -> float:
    """The step's length in the term's encoding."""
    if knob.scale == "levels":
        return 1.0
    return math.log(2.0) if knob.scale == "log" else knob.high - knob.low


def estimate_effects(
    rows: Sequence[Observation],
    knobs: Sequence[Knob],
    at_equal: str = "flops",
    target: float | None = None,
    noise: float | None = None,
    seed: int = 0,
    draws: int = BOOTSTRAP,
) -> Effects:
    """Each knob's Effect on the loss at T holding `at_equal` fixed (module docstring). `noise`: the sd of a
    prediction without one of its own; `draws`: the bootstrap's draws."""
    if at_equal not in AT_EQUAL:
        raise ValueError(f"at_equal must be one of {', '.join(AT_EQUAL)}, not {at_equal!r}")
    rows = [o for o in rows if math.isfinite(o.loss) and o.flops > 0 and (at_equal != "params" or (o.params or 0) > 0)]
    by_name = {k.name: k for k in knobs}
    shape = [k for k in SHAPE if k in by_name]
    left_out = {shape[1]: f"follows from size and {shape[0]} at equal {AT_EQUAL[at_equal]}"} if (
        at_equal != "shape" and len(shape) == 2) else {}  # fmt: skip
    terms = [t for k in knobs if k.name not in left_out for t in knob_terms(k, rows)]
    if left_out:  # depth's step at equal size: the left-out width follows
        terms = [(replace(e, step=f"{e.step}, {shape[1]} following") if e.knob == shape[0] else e, c, r)
                 for e, c, r in terms]  # fmt: skip
    size = _size_columns(rows, at_equal)
    varied, position = [(e, c, r) for e, c, r in terms if not r], {id(e): i for i, (e, _, _) in enumerate(terms)}
    joint = _identified(terms, size)
    fitted = [(e, c) for e, c, r in joint if not r]
    notes, fits = [], {}
    if _enough(rows, size, fitted):
        fits, terms = _fitted(rows, size, fitted, by_name, noise, seed, draws), joint
    elif varied:  # too few trials for every knob at once: each knob alone with size, collinear with size alone
        notes.append(f"{len(rows)} trials for {len(varied)} knob terms: each knob fitted alone with size, the "
                     "others left to the scatter (the search sampled them independently)")  # fmt: skip
        terms = [(e, c, r) for e, c, r in terms if r]
        for name in dict.fromkeys(e.knob for e, _, _ in varied):
            mine = _identified([t for t in varied if t[0].knob == name], size)
            terms += mine
            kept = [(e, c) for e, c, r in mine if not r]
            if _enough(rows, size, kept):
                fits |= _fitted(rows, size, kept, by_name, noise, seed, draws)
        terms.sort(key=lambda t: position[id(t[0])])
    out = [replace(e, reason=r) if r else fits.get(id(e), replace(e, reason="too few trials for the fit"))
           for e, _, r in terms]  # fmt: skip
    out += [Effect(k, "-", None, None, None, reason=why) for k, why in left_out.items()]
    return Effects(at_equal, target, len(rows), out, notes=notes)


def _enough(rows: Sequence, size: np.ndarray, terms: Sequence) -> bool:
    """Whether a fit of `terms` has at least twice as many trials as coefficients (intercept, size, terms): fewer,
    and resampled trials leave the design rank-deficient in too many bootstrap draws."""
    return len(terms) > 0 and len(rows) >= 2 * (1 + size.shape[1] + len(terms))


def _fitted(rows, size, fitted: list, by_name: Mapping[str, Knob], noise, seed: int, draws: int) -> dict[int, Effect]:
    """The `fitted` terms' Effects (keyed by id of the unfitted one) from one WLS fit and its bootstrap."""
    columns = [c for _, c in fitted]
    boot, point, out = _bootstrap(rows, size, columns, noise, seed, draws), _point(rows, size, columns, noise), {}
    for i, (effect, _) in enumerate(fitted):
        step = _scale(effect, by_name[effect.knob])
        if np.isnan(boot[:, i]).mean() > 0.5:
            out[id(effect)] = replace(effect, reason="unidentified in most bootstrap draws")
            continue
        low, high = (float(q) * step for q in np.nanpercentile(boot[:, i], [10, 90]))
        reason = "interval spans 0" if low <= 0.0 <= high else ""
        out[id(effect)] = replace(effect, effect=float(point[i]) * step, low=low, high=high, reason=reason)
    return out


def _sds(rows: Sequence[Observation], noise: float | None) -> np.ndarray:
    return np.array([o.sd if o.sd is not None else (noise or 0.0) for o in rows])


def _design(size: np.ndarray, columns: Sequence[np.ndarray]) -> np.ndarray:
    return np.column_stack([np.ones(size.shape[0]), size, *columns])


def _point(rows, size, columns, noise) -> np.ndarray:
    """The knob terms' WLS coefficients."""
    design, y, sd = _design(size, columns), np.array([o.loss for o in rows]), _sds(rows, noise)
    return _wls(design, y, _fit_weights(design, y, sd))[1 + size.shape[1] :]


def _bootstrap(rows, size, columns, noise, seed: int, draws: int = BOOTSTRAP) -> np.ndarray:
    """BOOTSTRAP draws of the knob terms' coefficients: trials resampled, each loss perturbed by N(0, s_i^2). A
    draw in which a term is constant (or the design rank-deficient in it) gives NaN for it. The draws are fitted
    together, those that vary the same terms in one batch."""
    design, y, sd = _design(size, columns), np.array([o.loss for o in rows]), _sds(rows, noise)
    pick, shock = _resamples(np.random.default_rng(seed), len(y), draws)  # (draws, n) each
    d, target, s = design[pick], y[pick] + shock * sd[pick], sd[pick]  # (draws, n, p), (draws, n), (draws, n)
    varied = np.ptp(d, axis=1) > 0  # (draws, p): the terms each draw varies
    varied[:, 0] = True
    coef = np.full(varied.shape, np.nan)
    for mask in np.unique(varied, axis=0):
        batch = np.flatnonzero((varied == mask).all(axis=1))
        sub = d[batch][:, :, mask]  # (k, n, m): the draws that vary these terms
        singular = np.linalg.svd(sub, compute_uv=False)  # matrix_rank's rule: full rank in the varied terms
        full = (singular > singular[:, :1] * max(sub.shape[1:]) * np.finfo(float).eps).all(axis=1)
        batch, sub = batch[full], sub[full]
        if not len(batch):
            continue
        fitted = _wls(sub, target[batch], _fit_weights(sub, target[batch], s[batch]))  # (k, m)
        coef[np.ix_(batch, np.flatnonzero(mask))] = fitted
    return coef[:, 1 + size.shape[1] :]


def _resamples(rng: np.random.Generator, n: int, draws: int) -> tuple[np.ndarray, np.ndarray]:
    """Each draw's resampled trials and standard normal shocks, (draws, n) each, taken from `rng` draw by draw
    (the picks, then the shocks) so that a seed gives the same draws whatever the batching."""
    pick, shock = np.empty((draws, n), dtype=np.int64), np.empty((draws, n))
    for b in range(draws):
        pick[b], shock[b] = rng.integers(0, n, n), rng.normal(0.0, 1.0, n)
    return pick, shock


def partial_dependence(
    rows: Sequence[Observation], knobs: Sequence[Knob], knob: str, family: str | None, points: int = 12
) -> list[tuple[float, float]]:
    """The loss at T the fit at equal shape (no size term) gives along `knob`'s searched range for `family` (a
    residual level; None: the reference), every other term at its trials' mean: [(value, loss)]. Empty when the
    knob is not a numeric searched knob the fit identifies."""
    by_name = {k.name: k for k in knobs}
    if knob not in by_name or by_name[knob].scale == "levels":
        return []
    rows = [o for o in rows if math.isfinite(o.loss)]
    size = _size_columns(rows, "shape")
    kept = [(e, c) for e, c, r in _identified([t for k in knobs for t in knob_terms(k, rows)], size) if not r]
    if len(rows) < len(kept) + 3 or not any(e.knob == knob for e, _ in kept):
        return []
    design, y = _design(size, [c for _, c in kept]), np.array([o.loss for o in rows])
    coef = _wls(design, y, _fit_weights(design, y, _sds(rows, None)))
    k = by_name[knob]
    centre = float(np.mean([k.encode(o.knobs[knob]) for o in rows if knob in o.knobs and acts_in(k, o)]))
    base = float(coef[0])
    for b, (e, c) in zip(coef[1:], kept, strict=True):
        if e.knob == "residual":
            base += float(b) * (e.level == family)
        elif e.knob != knob:
            base += float(b) * float(c.mean())
    slope = sum(float(b) for b, (e, _) in zip(coef[1:], kept, strict=True) if e.knob == knob)
    grid = np.geomspace(k.low, k.high, points) if k.scale == "log" else np.linspace(k.low, k.high, points)
    return [(float(x), base + slope * (k.encode(x) - centre)) for x in grid]
