"""A search's answer at T: its rungs, and what it knows beyond them, put together once.

`forecast_at_target(rows, target, forecasting)` is what `nas show`, `nas show --json`, the export, the repeats and
the dashboard read (through `nas.search_answer`):

1. **The rungs** the layout trains (rows from its lowest to its top rung): the study's answer
   (`nas.answer.target.answer_at_target`). With one rung per trial, each trial's loss is its top rung's.
2. **The top rung's bias** taken out (`nas.answer.discrepancy`): the error model's prior, moved by the anchors
   (rows above the top rung); an offset the corpora disagree on is applied shrunk.
3. **The level at T** (`nas.answer.level`), where every trial trains once at its top rung: the level rungs (rows
   below the lowest rung) of a few configs fit the study's curve, which carries every top rung to T. Without it
   the losses stated are the top rung's, and the answer says so (`Prediction.at_target` False). On a ladder of
   several rungs the study's own curve carries them.
4. **How sure it is** (`nas.answer.error_model`): each prediction's sd, its own part (seed noise, the
   correction's uncertainty, the misfit) and the level's, the 80% band from them, and the calls between trials
   (`Answer.gap_sd`, `Answer.margin`, `Answer.tied`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..store import RungRow
from .discrepancy import Anchoring, Discrepancy, Distance, aspect, width_distance
from .error_model import BAND_Z, NO_MODEL, ErrorModel, TrialFacts, band
from .extrapolate import budget_key
from .level import LevelCurve, LevelPoint, NoCurve, fit_level
from .target import Answer, Prediction, answer_at_target

__all__ = ["Forecasting", "forecast_at_target"]

_EPS = 1e-9  # relative tolerance when comparing a row's budget with the layout's


@dataclass(frozen=True)
class Forecasting:
    """What a search's answer knows beyond its rung rows: each trial's target shape (n_layers, d_model) and family,
    the layout's lowest and top rungs (rows below the lowest are level rungs, above the top anchors), the error
    model, whether the top rung narrows otherwise than the level rungs (`offset_applies`: its offset from their
    path is taken out), and how a rung's distance from the target is read."""

    shapes: Mapping[int, tuple[int, int]]
    families: Mapping[int, str]
    lowest_flops: float
    top_flops: float
    model: ErrorModel = NO_MODEL
    offset_applies: bool = True
    distance: Distance = width_distance

    @property
    def anchoring(self) -> Anchoring:
        return Anchoring(self.shapes, self.families, self.top_flops, self.model.bias, self.distance)

    def split(self, rows: Sequence[RungRow]) -> tuple[list[RungRow], list[RungRow]]:
        """(the layout's rows, the level rows below its lowest rung)."""
        low, high = self.lowest_flops * (1 - _EPS), self.top_flops * (1 + _EPS)
        return [r for r in rows if low <= r.budget_flops <= high], [r for r in rows if r.budget_flops < low]


def forecast_at_target(rows: Sequence[RungRow], target: float, forecasting: Forecasting | None) -> Answer:
    """The search's answer at `target` (module docstring); without `forecasting` (a search whose rungs are its
    configs themselves), the study's answer alone."""
    if forecasting is None:
        return answer_at_target(rows, target)
    layout, level_rows = forecasting.split(rows)
    study = answer_at_target(layout, target)
    noise = forecasting.model.noise(study.noise, study.noise_dof)
    discrepancy = forecasting.anchoring.fit(rows, noise)
    corrections = forecasting.anchoring.corrections(layout, discrepancy)
    model = _moved(forecasting.model, discrepancy)
    facts = _facts(layout, forecasting)
    centre = discrepancy.centre
    one_rung = forecasting.lowest_flops >= forecasting.top_flops * (1 - _EPS)
    level = _level(layout, level_rows, noise, forecasting) if one_rung and level_rows else None
    out, factors = {}, {}
    for number, p in study.predictions.items():
        shift = corrections.get(number, (0.0, 0.0))[0]
        if number not in facts or not math.isfinite(p.loss):
            if not isinstance(level, LevelCurve):  # with a curve, a loss it cannot carry is left out, not mixed in
                out[number] = p
            continue
        own = math.sqrt(model.relative_variance(facts[number], centre, noise))
        out[number], factors[number] = _predicted(p, shift, own, study, number, level, target)
        if not model.measured_at(facts[number]):
            out[number] = replace(out[number], basis=f"{out[number].basis}; {_short_top_rung(facts[number], model)}")
    if one_rung and level is None:
        level = NoCurve("no configs measured below the top rung (--level-configs)")
    return replace(
        study,
        predictions=out,
        discrepancy=discrepancy,
        model=model,
        facts=facts,
        centre=centre,
        level=level,
        factors=factors,
    )


def _moved(model: ErrorModel, discrepancy: Discrepancy) -> ErrorModel:
    """The error model with beta as the anchors moved it (its sd with them); without anchors, as measured."""
    if not discrepancy.anchors:
        return model
    return replace(model, bias=replace(model.bias, beta=discrepancy.beta, beta_sd=discrepancy.beta_sd))


def _predicted(
    p: Prediction, shift: float, own: float, study: Answer, number: int, level, target: float
) -> tuple[Prediction, float]:
    """A trial's prediction corrected, carried and given its sd; and its carry factor to T."""
    if isinstance(level, LevelCurve):  # one rung per trial, carried to T by the level curve
        loss, level_sd = level.carry(p.loss + shift, target)
        factor = level.factor(target)
        relative, total = factor * own, math.hypot(factor * own, level_sd)
        low, high = band(loss, total)
        basis = f"{p.basis}; carried to T by the level curve"
        return replace(p, loss=loss, at_target=True, sd=total, relative_sd=relative, low=low, high=high,
                       basis=basis), factor  # fmt: skip
    if not p.at_target:  # one rung per trial, no curve: the top rung's loss
        loss = p.loss + shift
        return replace(p, loss=loss, sd=own, relative_sd=own, low=band(loss, own)[0], high=band(loss, own)[1]), 1.0
    factor = (study.highest[number] / target) ** study.exponents.get(p.group, 0.0)  # a ladder's own curve
    loss, relative = p.loss + factor * shift, factor * own
    if p.low is None or p.high is None:  # the curve's part unmeasured: no band
        return replace(p, loss=loss, relative_sd=relative), factor
    total = math.hypot(relative, (p.high - p.low) / 2.0 / BAND_Z)
    low, high = band(loss, total)
    return replace(p, loss=loss, sd=total, relative_sd=relative, low=low, high=high), factor


def _short_top_rung(facts: TrialFacts, model: ErrorModel) -> str:
    return (
        f"its top rung took {facts.steps} optimizer steps, fewer than any the error model was measured on "
        f"({model.top_rung_steps}): its band is not calibrated there"
    )


def _facts(layout: Sequence[RungRow], forecasting: Forecasting) -> dict[int, TrialFacts]:
    """Each trial's family, aspect, the narrowing distance of its highest layout rung, its seeds there and the
    fewest steps they took."""
    highest: dict[int, RungRow] = {}
    seeds: dict[tuple[int, float], set[int]] = {}
    steps: dict[tuple[int, float], int] = {}
    for r in layout:
        if r.val_loss is None or not math.isfinite(r.val_loss) or r.number not in forecasting.shapes:
            continue
        seeds.setdefault((r.number, r.budget_flops), set()).add(r.seed)
        key = (r.number, r.budget_flops)
        steps[key] = min(steps.get(key, r.steps), r.steps)
        if r.number not in highest or r.budget_flops > highest[r.number].budget_flops:
            highest[r.number] = r
    out = {}
    for number, row in highest.items():
        layers, width = forecasting.shapes[number]
        out[number] = TrialFacts(
            forecasting.families.get(number) or row.residual or "",
            aspect(layers, width),
            forecasting.distance(row, width),
            len(seeds[(number, row.budget_flops)]),
            steps[(number, row.budget_flops)],
        )
    return out


def _level(
    layout: Sequence[RungRow], level_rows: Sequence[RungRow], noise: float | None, forecasting: Forecasting
) -> LevelCurve | NoCurve:
    """The level curve from the level rows and their configs' top rungs (seed means)."""
    means = _means(level_rows)
    measured = {q.trial for q in means}
    top = {p.trial: p for p in _means(layout) if p.trial in measured}
    prior = forecasting.model.level
    if not forecasting.offset_applies:
        prior = replace(prior, offset=0.0, offset_sd=0.0)
    return fit_level(means, top, noise or forecasting.model.seed_noise, prior)


def _means(rows: Sequence[RungRow]) -> list[LevelPoint]:
    """One point per (trial, budget): the seed mean of its finite losses and how many seeds."""
    losses: dict[tuple[int, float], dict[int, float]] = {}
    for r in rows:
        if r.val_loss is not None and math.isfinite(r.val_loss):
            losses.setdefault((r.number, budget_key(r.budget_flops)), {})[r.seed] = r.val_loss
    return [LevelPoint(t, c, sum(v.values()) / len(v), len(v)) for (t, c), v in sorted(losses.items())]
