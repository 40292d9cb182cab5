"""Extrapolate each trial's validation loss from its rungs to a far larger training budget.

A trial (an architecture) is trained at a few budgets ("rungs") C_1 < ... < C_k and gives one loss per
rung and seed. Each trial i follows the power law

    L_i(C) = E + A_i * C^(-alpha_g)

with the floor E shared by the whole study, the exponent alpha_g shared by the trials of a group g (a
family, or the whole study when the family has too few curves, see below) and the amplitude A_i >= 0
per trial. E is the irreducible loss: the entropy of the text, a property of the data and not of the
architecture (the E of Hoffmann et al.'s L(N, D)), so every trial of a study, which all see one corpus,
shares it. How fast a family learns with compute is the family's exponent. Three rungs cannot pin three
parameters per trial; sharing (alpha, E) can, and it lets a trial seen at one rung only (not promoted)
still be extrapolated from its family.

Why E is not per family: with rungs spanning a factor eta^2 of compute, a family's own floor is poorly
identified, and a wrong floor is what an extrapolation far beyond the rungs is most sensitive to. On
the fidelity benchmark's ladder (`benchmarks/trust/fidelity.py`), fitted on the lowest two rungs and asked
for the third, a shared E predicted the held-out rung better than a floor per family (`report`'s
`ladder_check` measures this on any table); a check a user can run on their own ladder, which does not look at
the far budget.

Fit (weighted least squares on L). The losses of a trial at one rung are averaged over its seeds and
weighted by their number (the mean's inverse variance, up to a constant). With x = C / C_ref (C_ref
the geometric mean of the study's rungs, which keeps x^-alpha near 1) and y = x^-alpha_g, write
L_ij = E + a_i y_ij, a_i = A_i C_ref^-alpha_g. For fixed exponents the model is linear in (E, a_i), so
both are solved in closed form: a_i(E) = sum_j w (L - E) y / sum_j w y^2 per trial, and the total
squared error is then a convex quadratic in E, minimised and clipped to [0, 0.999 * min L] (which also
keeps every a_i > 0). Only the exponents are searched numerically: a grid over [0.05, 1.5] for one
shared exponent, a grid pass per group, then bounded Brent (one group) or a bounded least-squares
polish (several).

Groups. A family fits its own exponent when at least `min_trials` of its trials have >= 2 distinct
rungs and those curves leave a residual degree of freedom (points > trials + 2). These families fit E
with their exponents (stage 1). The trials of the other families take the exponent fitted over every
multi-rung trial of the study at that E (group `STUDY`, stage 2); when no family fits its own, STUDY's
exponent and E are fitted together over every multi-rung trial. If even those leave no residual degree
of freedom (e.g. no trial has 2 rungs, or one trial has exactly 3), nothing is extrapolated (group
`NONE`): the prediction is the trial's last observed loss (mean over seeds at its top rung) at any
budget, reported as E = that loss, A = 0, alpha = 0. A default exponent would give confident numbers
from no evidence.

Levels (`StudyFit.reanchored`). Given the curve (E and the exponents), each trial's amplitude can be solved
again with its rungs weighted otherwise than by their seeds: by the rungs' measured reliability, or with all
the weight on the trial's highest rung (`nas.answer.evidence`). The trial's prediction then rests on the evidence
the weights choose, and the curve only carries it from the rung's budget to the target's; at one rung, the
ranking is that rung's. A band around a prediction is calibrated on the search's own backtest
(`nas.answer.calibration`), not derived from this fit.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

STUDY = "<study>"  # group label: parameters fitted over all multi-rung trials of the study
NONE = "<none>"  # group label: nothing could be fitted; predictions are the last observed loss
ALPHA_BOUNDS = (0.05, 1.5)
E_SHARE = 0.999  # E <= E_SHARE * the group's smallest loss
_GRID = np.linspace(*ALPHA_BOUNDS, 59)

Rungs = dict[int, dict[float, list[float]]]  # trial -> rung flops -> one loss per seed


@dataclass(frozen=True)
class RungPoint:
    """One measured loss: `trial` trained at `flops` training FLOPs with `seed` reached `loss` (nats/token)."""

    trial: int
    family: str
    flops: float
    loss: float
    seed: int = 0


@dataclass(frozen=True)
class GroupFit:
    """Shared parameters of one group: fitted on `fit_trials`, used by `members`."""

    label: str
    alpha: float
    E: float
    fit_trials: tuple[int, ...]
    members: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class _Data:
    """Rung means of every fitted trial as flat arrays, which group's exponent each trial uses, and the fit.

    The shared E and the first-stage exponents are fitted on the points of `stage1_trials`; the STUDY
    exponent, when some trial needs it and a family has its own, in a second stage at that E over every
    multi-rung trial (`study_trials`).
    """

    trials: tuple[int, ...]
    labels: tuple[str, ...]  # exponent groups; the first n_stage1 are fitted with E
    n_stage1: int
    trial_group: np.ndarray  # (trials,): index into labels
    stage1_trials: np.ndarray  # (trials,) bool
    study_trials: np.ndarray  # (trials,) bool: multi-rung trials (the STUDY exponent's second stage)
    onehot: np.ndarray  # (points, trials): point -> trial
    flops: np.ndarray  # C, each point's rung budget (as `budget_key` rounds it)
    xlog: np.ndarray  # log(C / C_ref)
    loss: np.ndarray
    w: np.ndarray  # seeds averaged into each rung mean

    @functools.cached_property
    def point_trial(self) -> np.ndarray:
        """(points,): the trial of each point (computed once: every bootstrap replicate reads it)."""
        return self.onehot.argmax(axis=1)

    @functools.cached_property
    def fit_mask(self) -> np.ndarray:
        return self.stage1_trials[self.point_trial]

    def fit(self, loss: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """(E, alpha per label, a per trial) for `loss` at these points."""
        mask, pt = self.fit_mask, self.point_trial
        e_max = E_SHARE * float(loss.min())
        group = self.trial_group[pt[mask]]
        onehot = self.onehot[mask][:, self.stage1_trials]
        alpha = np.zeros(len(self.labels))
        alpha[: self.n_stage1], e = _fit_exponents(self.xlog[mask], loss[mask], self.w[mask], onehot, group, e_max)
        if self.n_stage1 < len(self.labels):  # STUDY's exponent at the shared E
            study = self.study_trials[pt]
            onehot = self.onehot[study][:, self.study_trials]
            alpha[-1] = _fit_exponent_at(e, self.xlog[study], loss[study], self.w[study], onehot)
        return e, alpha, self.amplitudes(e, alpha, loss)

    def amplitudes(self, e: float, alpha: np.ndarray, loss: np.ndarray) -> np.ndarray:
        """a_i = max(0, sum w (L - E) y / sum w y^2) per trial, y = exp(-alpha_g(i) * xlog)."""
        y = np.exp(-alpha[self.trial_group[self.point_trial]] * self.xlog)
        return _amplitudes_at(e, y, loss, self.w, self.onehot)

    def fitted(self, e: float, alpha: np.ndarray, a: np.ndarray) -> np.ndarray:
        pt = self.point_trial
        return e + a[pt] * np.exp(-alpha[self.trial_group[pt]] * self.xlog)


@dataclass(frozen=True)
class _Trial:
    group: str
    a: float  # amplitude in x = C / C_ref units (0 for NONE)
    top_loss: float  # mean over seeds at the top rung


@dataclass(frozen=True, eq=False)
class StudyFit:
    """The fitted study: per-trial predictions `predict`, parameters `params`, and `reanchored` levels."""

    c_ref: float
    groups: Mapping[str, GroupFit]
    noise: float | None  # seed_noise of the study
    _trials: Mapping[int, _Trial] = field(repr=False)
    _data: _Data | None = field(repr=False)

    @property
    def trials(self) -> tuple[int, ...]:
        return tuple(sorted(self._trials))

    def params(self, trial: int) -> tuple[float, float, float, str]:
        """(E, A, alpha, group) of L(C) = E + A * C^-alpha for `trial`, C in training FLOPs."""
        t = self._trial(trial)
        if t.group == NONE:
            return t.top_loss, 0.0, 0.0, NONE
        g = self.groups[t.group]
        return g.E, t.a * self.c_ref**g.alpha, g.alpha, t.group

    def predict(self, trial: int, flops: float) -> float:
        """The loss of `trial` at `flops` training FLOPs: E + A * flops^-alpha."""
        t, x = self._trial(trial), _positive(flops) / self.c_ref
        if t.group == NONE:
            return t.top_loss
        g = self.groups[t.group]
        return g.E + t.a * x**-g.alpha

    def reanchored(self, weight: Callable[[int, float], float]) -> StudyFit:
        """The same curve (E and each group's exponent) with every fitted trial's amplitude solved again, its rung
        means weighted by seeds x `weight(trial, rung flops)` instead of by seeds alone. A trial whose rungs all
        weigh 0 keeps its amplitude."""
        d = self._data
        if d is None:
            return self
        lam = np.array([float(weight(d.trials[k], float(c))) for k, c in zip(d.point_trial, d.flops, strict=True)])
        if np.any(lam < 0) or not np.all(np.isfinite(lam)):
            raise ValueError("reanchored: weights must be finite and >= 0")
        e = next(iter(self.groups.values())).E
        alpha = np.array([self.groups[label].alpha for label in d.labels])
        y = np.exp(-alpha[d.trial_group[d.point_trial]] * d.xlog)
        w = d.w * lam
        weighted = (w * y * y) @ d.onehot > 0
        a = np.maximum((w * (d.loss - e) * y) @ d.onehot / np.where(weighted, (w * y * y) @ d.onehot, 1.0), 0.0)
        trials = dict(self._trials)
        for k, t in enumerate(d.trials):
            if weighted[k]:
                trials[t] = replace(trials[t], a=float(a[k]))
        return replace(self, _trials=trials)

    def _trial(self, trial: int) -> _Trial:
        if trial not in self._trials:
            raise KeyError(f"trial {trial}: no finite loss in the study")
        return self._trials[trial]


def fit_study(points: Sequence[RungPoint], *, min_trials: int = 3) -> StudyFit:
    """Fit the shared E, each group's exponent and each trial's A; non-finite losses are ignored."""
    families, rungs = _rungs(points)
    if not rungs:
        raise ValueError("fit_study: no point with a finite loss")
    flops = sorted({c for r in rungs.values() for c in r})
    c_ref = math.exp(sum(math.log(c) for c in flops) / len(flops))
    assign = _assign(families, rungs, min_trials)
    trials = {t: _Trial(NONE, 0.0, _top(rungs[t])[1]) for t in assign if assign[t] == NONE}
    fitted = sorted(t for t in assign if assign[t] != NONE)
    if not fitted:
        return StudyFit(c_ref, {}, seed_noise(points), trials, None)
    d = _data(fitted, assign, families, rungs, c_ref)
    e, alpha, a = d.fit(d.loss)
    groups = {}
    for g, label in enumerate(d.labels):
        own = [t for t in fitted if len(rungs[t]) >= 2 and label in (STUDY, families[t])]
        members = tuple(t for t in fitted if assign[t] == label)
        groups[label] = GroupFit(label, float(alpha[g]), e, tuple(own), members)
    trials.update({t: _Trial(assign[t], float(a[k]), _top(rungs[t])[1]) for k, t in enumerate(d.trials)})
    return StudyFit(c_ref, groups, seed_noise(points), trials, d)


def seed_noise(points: Sequence[RungPoint]) -> float | None:
    """Pooled seed-to-seed standard deviation: sqrt(sum (L - rung mean)^2 / sum (n_seeds - 1)) over every
    (trial, rung) with >= 2 seeds; None without repeats. Points sharing (trial, rung, seed) count as one run."""
    reps = _repeats(points)
    if not reps:
        return None
    return math.sqrt(sum(float(((v - v.mean()) ** 2).sum()) for v in reps) / sum(v.size - 1 for v in reps))


def seed_noise_dof(points: Sequence[RungPoint]) -> int:
    """The degrees of freedom `seed_noise` rests on: sum (n_seeds - 1) over the repeated (trial, rung)s."""
    return sum(v.size - 1 for v in _repeats(points))


def _repeats(points: Sequence[RungPoint]) -> list[np.ndarray]:
    """The losses of every (trial, rung) measured with >= 2 seeds."""
    _, rungs = _rungs(points)
    return [np.asarray(v) for r in rungs.values() for v in r.values() if len(v) >= 2]


def budget_key(flops: float) -> float:
    """A rung's budget to 9 significant digits, so that one rung read twice is one rung."""
    return float(f"{flops:.9g}")


def _positive(flops: float) -> float:
    if not (math.isfinite(flops) and flops > 0):
        raise ValueError(f"flops must be finite and > 0 (got {flops})")
    return flops


def _rungs(points: Sequence[RungPoint]) -> tuple[dict[int, str], Rungs]:
    """(trial -> family, trial -> rung -> loss per seed) over finite losses; a seed seen twice is averaged."""
    families: dict[int, str] = {}
    runs: dict[tuple[int, float, int], list[float]] = defaultdict(list)
    for p in points:
        if families.setdefault(p.trial, p.family) != p.family or p.family in (STUDY, NONE):
            raise ValueError(f"trial {p.trial}: family {p.family!r} (reserved, or a second family of the trial)")
        if math.isfinite(p.loss):
            runs[(p.trial, budget_key(_positive(p.flops)), p.seed)].append(p.loss)
    rungs: Rungs = defaultdict(lambda: defaultdict(list))
    for (trial, flops, _), losses in sorted(runs.items()):
        rungs[trial][flops].append(sum(losses) / len(losses))
    return families, {t: dict(r) for t, r in rungs.items()}


def _top(rungs: dict[float, list[float]]) -> tuple[float, float]:
    top = max(rungs)
    return top, sum(rungs[top]) / len(rungs[top])


def _dof(rungs: Rungs, trials: list[int]) -> int:
    """Rung means left over after fitting a_i per trial and the shared (alpha, E)."""
    return sum(len(rungs[t]) for t in trials) - len(trials) - 2


def _assign(families: dict[int, str], rungs: Rungs, min_trials: int) -> dict[int, str]:
    """trial -> group label: its family when that can be fitted, else STUDY, else NONE."""
    multi = [t for t in rungs if len(rungs[t]) >= 2]
    if _dof(rungs, multi) < 1:
        return dict.fromkeys(rungs, NONE)
    own = defaultdict(list)
    for t in multi:
        own[families[t]].append(t)
    ok = {f for f, ts in own.items() if len(ts) >= min_trials and _dof(rungs, ts) >= 1}
    return {t: families[t] if families[t] in ok else STUDY for t in rungs}


def _data(trials: list[int], assign: dict[int, str], families: dict[int, str], rungs: Rungs, c_ref: float) -> _Data:
    """The arrays of the fit. Exponent groups: the families that fit their own (stage 1, with E), then STUDY
    if a trial uses it; with no such family, STUDY alone is stage 1 (fitted over every multi-rung trial)."""
    own = sorted({assign[t] for t in trials} - {STUDY})
    labels = (*own, STUDY) if STUDY in assign.values() else tuple(own)
    n_stage1 = len(own) or 1
    multi = np.array([len(rungs[t]) >= 2 for t in trials])
    stage1 = multi & np.array([not own or families[t] in own for t in trials])
    rows = [(k, c, sum(v) / len(v), len(v)) for k, t in enumerate(trials) for c, v in rungs[t].items()]
    idx, flops, loss, w = (np.array(col) for col in zip(*rows, strict=True))
    return _Data(
        trials=tuple(trials),
        labels=labels,
        n_stage1=n_stage1,
        trial_group=np.array([labels.index(assign[t]) for t in trials]),
        stage1_trials=stage1,
        study_trials=multi,
        onehot=np.eye(len(trials))[idx.astype(int)],
        flops=flops,
        xlog=np.log(flops / c_ref),
        loss=loss,
        w=w.astype(float),
    )


def _profile(alpha: np.ndarray, xlog, loss, w, onehot, group, e_max: float) -> tuple[np.ndarray, np.ndarray]:
    """Per candidate row of exponents `alpha` (G, groups): the weighted squared error and the shared E, with
    E in [0, e_max] and every a_i in closed form (point j of trial i uses its group's exponent).

    a_i(E) = (P_i - E Q_i) / S_i with P = sum w L y, Q = sum w y, S = sum w y^2 over trial i's points;
    the error is then quadratic in E with minimum at sum_i (M_i - P_i Q_i / S_i) / sum_i (W_i - Q_i^2 / S_i),
    M = sum w L, W = sum w (> 0 by Cauchy-Schwarz when every trial has 2 distinct rungs).
    """
    y = np.exp(-alpha[:, group] * xlog)  # (G, n)
    W, M = w @ onehot, (w * loss) @ onehot
    Q, S, P = (w * y) @ onehot, (w * y * y) @ onehot, (w * loss * y) @ onehot
    e = np.clip((M - P * Q / S).sum(axis=1) / (W - Q * Q / S).sum(axis=1), 0.0, e_max)
    a = np.maximum((P - e[:, None] * Q) / S, 0.0)
    resid = loss - e[:, None] - (a @ onehot.T) * y
    return (w * resid**2).sum(axis=1), e


def _fit_exponents(xlog, loss, w, onehot, group, e_max: float) -> tuple[np.ndarray, float]:
    """(alpha per group, E) minimising the profiled error: a grid over one shared exponent, a grid pass per
    group with the others held, then bounded Brent (one group) or L-BFGS-B (several) from the best point."""
    from scipy.optimize import least_squares, minimize_scalar  # on first fit: a search of one rung never fits

    k = int(group.max()) + 1

    def sse(alpha: np.ndarray) -> np.ndarray:
        return _profile(np.atleast_2d(alpha), xlog, loss, w, onehot, group, e_max)[0]

    best = np.full(k, _GRID[int(np.argmin(sse(np.repeat(_GRID[:, None], k, axis=1))))])
    for j in range(k) if k > 1 else ():
        candidates = np.repeat(best[None, :], _GRID.size, axis=0)
        candidates[:, j] = _GRID
        best = candidates[int(np.argmin(sse(candidates)))]
    if k == 1:
        i = int(np.abs(_GRID - best[0]).argmin())
        res = minimize_scalar(
            lambda al: sse(np.array([al]))[0],
            bounds=(_GRID[max(i - 1, 0)], _GRID[min(i + 1, _GRID.size - 1)]),
            method="bounded",
            options={"xatol": 1e-9},
        )
        polished = np.array([res.x])
    else:

        def residuals(alpha: np.ndarray) -> np.ndarray:  # sqrt(w) * (L - fit), E and a_i profiled out
            y = np.exp(-alpha[group] * xlog)
            e = _profile(alpha[None, :], xlog, loss, w, onehot, group, e_max)[1][0]
            a = _amplitudes_at(e, y, loss, w, onehot)
            return np.sqrt(w) * (loss - e - (onehot @ a) * y)

        res = least_squares(residuals, best, bounds=ALPHA_BOUNDS, xtol=1e-12, ftol=1e-15, gtol=1e-15)
        polished = res.x
    if sse(polished)[0] <= sse(best)[0]:
        best = polished
    return best, float(_profile(best[None, :], xlog, loss, w, onehot, group, e_max)[1][0])


def _fit_exponent_at(e: float, xlog, loss, w, onehot) -> float:
    """The exponent minimising the error of these curves with E held at `e` (grid, then bounded Brent)."""
    from scipy.optimize import minimize_scalar  # on first fit (`_fit_exponents`)

    def sse(alpha: np.ndarray) -> np.ndarray:
        y = np.exp(-np.outer(alpha, xlog))
        a = np.maximum(((w * (loss - e)) * y) @ onehot / ((w * y * y) @ onehot), 0.0)
        return (w * (loss - e - (a @ onehot.T) * y) ** 2).sum(axis=1)

    i = int(np.argmin(sse(_GRID)))
    res = minimize_scalar(
        lambda al: sse(np.array([al]))[0],
        bounds=(_GRID[max(i - 1, 0)], _GRID[min(i + 1, _GRID.size - 1)]),
        method="bounded",
        options={"xatol": 1e-9},
    )
    return float(res.x) if res.fun <= sse(_GRID[i : i + 1])[0] else float(_GRID[i])


def _amplitudes_at(e: float, y: np.ndarray, loss, w, onehot) -> np.ndarray:
    """a_i = max(0, sum w (L - E) y / sum w y^2) per trial."""
    return np.maximum((w * (loss - e) * y) @ onehot / ((w * y * y) @ onehot), 0.0)
