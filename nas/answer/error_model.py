"""One error model for every statement of certainty an answer makes: the band, "resolved" and "tied", the front's
ties, what the answer rests on, `nas effects`' intervals and the dashboard all read it.

A trial's prediction at T rests on its top rung: the seed mean of its loss there (`n` seeds), corrected for the
top rung's bias (`nas.answer.discrepancy`: s (beta (z - z0) + phi_family), s the narrowing distance, z the
target's ln(depth / width)), and carried to T by the study's level curve (`nas.answer.level`), which scales a loss
difference at the top rung by c = (C_top / T)^alpha. Its error has four parts, each measured:

- **seed noise** sigma^2 / n: sigma the study's own, measured on its repeated runs with nu degrees of freedom,
  pooled with the noise measured across corpora sigma_0, which weighs as nu_0 degrees of freedom (`ErrorModel.noise`:
  sigma^2 = (nu_0 sigma_0^2 + nu s^2) / (nu_0 + nu)), so that a handful of repeats does not set it alone;
- **the bias correction's uncertainty**: beta's sd (as the anchors moved it, where a search has them) times
  s (z - z0), and the family offset's spread across the corpora times s (`BiasPrior.family_sd`);
- **the misfit no line explains**: a config's own error beyond size, family and shape, in units of the seed noise,
  per family (`misfit_ratio`: measured across corpora; a cascaded config's top rung misses by less than a NAG's or
  an ANCRe's);
- **the curve's**: the level's uncertainty (`LevelCurve.carry`), shared by every trial of the study.

The first three are a trial's own (`relative_sd`): they decide between two trials. The fourth moves every
prediction alike: it widens the band of each (`total_sd`), never a comparison. For two trials a and b the gap's sd
is c times the root of the sum of their own parts, with the parts the two share taken once: beta's part on
s_a (z_a - z0) - s_b (z_b - z0), a family offset on s_a - s_b when both are of that family. A gap is **resolved**
when it exceeds `call_z` (1.645, one-sided 95%) of that sd, **tied** otherwise; the 80% band is the prediction
+-1.2816 total sd.

How much of a family offset the answer applies follows from the same spread: an offset m whose corpora disagree by
sd d is applied as m x m^2 / (m^2 + d^2) (`BiasPrior.applied_family`): whole where they agree, shrunk toward zero
where the disagreement is as large as the offset.

The constants are fitted by `benchmarks.trust.forecast_constants` on the fidelity corpora: when `make fidelity`
grades a corpus, on the others only; the model a search uses (`measured_model`, package data
`forecast_constants.json`) on all of them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources

from .discrepancy import NO_PRIOR, BiasPrior
from .level import LevelPrior

__all__ = [
    "BAND_Z",
    "CALL_Z",
    "CONSTANTS_FILE",
    "NO_MODEL",
    "ErrorModel",
    "TrialFacts",
    "measured_model",
    "model_from_dict",
]

BAND_Z = 1.2816  # the standard normal's 90th percentile: the central 80% band is +-BAND_Z sd
CALL_Z = 1.6449  # the standard normal's 95th percentile: a call is wrong at most 5% of the time at its margin
CONSTANTS_FILE = "forecast_constants.json"  # package data beside this module (`measured_model`)


@dataclass(frozen=True)
class TrialFacts:
    """What a trial's prediction rests on: its family, the target's aspect z = ln(depth / width), the narrowing
    distance s of its top rung, how many seeds measured it there, and the fewest optimizer steps any of them took
    (None: not recorded)."""

    family: str
    aspect: float
    distance: float
    seeds: int = 1
    steps: int | None = None


@dataclass(frozen=True)
class ErrorModel:
    """The model's constants (module docstring): the bias correction's prior, each family's misfit in units of the
    seed noise (`default_ratio` for a family it does not name), the seed noise measured across corpora, the level's
    prior, the call's z, where it was measured, how many degrees of freedom of a search's own repeats the
    measured seed noise weighs as (`noise`), and the fewest optimizer steps of any top rung it was measured on
    (`top_rung_steps`: a top rung trained in fewer lies outside what the model has seen, `measured_at`)."""

    bias: BiasPrior = NO_PRIOR
    misfit_ratio: Mapping[str, float] = field(default_factory=dict)
    default_ratio: float = 0.0
    seed_noise: float = 0.02
    level: LevelPrior = LevelPrior()
    call_z: float = CALL_Z
    source: str = "none"
    seed_noise_dof: float = 0.0
    top_rung_steps: int = 0

    def measured_at(self, facts: TrialFacts) -> bool:
        """Whether the model was measured on top rungs as short as this trial's: at least `top_rung_steps`
        optimizer steps (or not recorded). Below, its correction, band and calls extrapolate what it has seen."""
        return facts.steps is None or facts.steps >= self.top_rung_steps

    def noise(self, measured: float | None, dof: int) -> float:
        """The seed noise a search's answer reads: its `measured` sd on `dof` degrees of freedom pooled with
        `seed_noise` on `seed_noise_dof`, sqrt((nu_0 sigma_0^2 + nu s^2) / (nu_0 + nu)); `seed_noise` where none
        was measured."""
        if measured is None or dof <= 0:
            return self.seed_noise
        nu0 = self.seed_noise_dof
        return math.sqrt((nu0 * self.seed_noise**2 + dof * measured**2) / (nu0 + dof))

    def relative_variance(self, facts: TrialFacts, centre: float, noise: float | None) -> float:
        """The variance of a trial's own error at its top rung (seed noise, the correction's uncertainty, the
        misfit): nats^2, before the carry to T."""
        sigma = noise if noise else self.seed_noise
        beta = (self.bias.beta_sd * facts.distance * (facts.aspect - centre)) ** 2
        offset = (self.bias.family_sd.get(facts.family, 0.0) * facts.distance) ** 2
        misfit = (self.misfit_ratio.get(facts.family, self.default_ratio) * sigma) ** 2
        return sigma**2 / max(facts.seeds, 1) + beta + offset + misfit

    def gap_variance(self, a: TrialFacts, b: TrialFacts, centre: float, noise: float | None) -> float:
        """The variance of the difference of two trials' errors at the top rung: their own parts, with beta's and
        a shared family's offset counted once on the difference."""
        sigma = noise if noise else self.seed_noise
        seeds = sigma**2 * (1.0 / max(a.seeds, 1) + 1.0 / max(b.seeds, 1))
        beta = (self.bias.beta_sd * (a.distance * (a.aspect - centre) - b.distance * (b.aspect - centre))) ** 2
        sd_a, sd_b = (self.bias.family_sd.get(f.family, 0.0) for f in (a, b))
        if a.family == b.family:
            offset = (sd_a * (a.distance - b.distance)) ** 2
        else:
            offset = (sd_a * a.distance) ** 2 + (sd_b * b.distance) ** 2
        misfit = sum((self.misfit_ratio.get(f.family, self.default_ratio) * sigma) ** 2 for f in (a, b))
        return seeds + beta + offset + misfit

    def describe(self) -> str:
        ratios = ", ".join(f"{f} {r:.2f}" for f, r in sorted(self.misfit_ratio.items()))
        return (
            f"error model measured on {self.source}: the bias's {self.bias.describe()}; misfit per family in seed "
            f"noise units {ratios or 'none'}; calls resolved beyond {self.call_z:.3g} sd of their gap"
        )


NO_MODEL = ErrorModel()


def model_from_dict(raw: Mapping) -> ErrorModel:
    """An ErrorModel from its JSON form (`benchmarks.trust.forecast_constants` writes it)."""
    bias, level = raw["bias"], raw["level"]
    prior = BiasPrior(
        bias["beta"], bias["beta_sd"], dict(bias["family"]), raw["source"], bias["misfit"], dict(bias["family_sd"])
    )
    return ErrorModel(
        prior,
        dict(raw["misfit_ratio"]),
        raw["default_ratio"],
        raw["seed_noise"],
        LevelPrior(**{**level, "source": raw["source"]}),
        raw.get("call_z", CALL_Z),
        raw["source"],
        raw.get("seed_noise_dof", 0.0),
        int(raw.get("top_rung_steps", 0)),
    )


def measured_model() -> ErrorModel:
    """The model a search uses: its constants fitted on every fidelity corpus (package data)."""
    return model_from_dict(json.loads(resources.files("nas.answer").joinpath(CONSTANTS_FILE).read_text()))


def band(loss: float, sd: float) -> tuple[float, float]:
    """The central 80% band of a prediction with this sd."""
    half = BAND_Z * sd
    return max(0.0, loss - half), loss + half


def resolved(gap: float, variance: float, z: float = CALL_Z) -> bool:
    """Whether a gap is beyond `z` sd of its error."""
    return abs(gap) > z * math.sqrt(max(variance, 0.0))
