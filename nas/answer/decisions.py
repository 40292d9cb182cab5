"""What an answer at the target rests on: size against architecture, and the decisions it makes at matched cost.

At a fixed target most of the spread of losses across configs is size (docs/design.md §5): a ranking can agree
with the truth while it knows nothing but parameter counts. So an answer is read apart from size:

- **The size trend.** loss ~ a + b x + c x^2 with x = ln N (N the parameter count), least squares over the
  configs (`size_trend`). What it leaves, each config's residual, is what the architecture does at that size.
- **Architecture tau.** Kendall tau-b between the residuals of two sets of losses, each against its own size
  trend (`architecture_tau`): pure size gives 0 whatever it ranks; its ceiling is the truth's own seed-vs-seed
  value.
- **Contrasts at matched cost.** Two configs whose executed FLOPs per token are within `MATCHED_COST` (15%) of
  each other, of different architecture, are a decision a user faces (`matched_contrasts`). Its kind says
  what differs: the residual `family` alone, `depth vs width` (shape, same family and routing), `MoD` (the
  routing, same family), or `mixed`. A contrast is resolvable when its two losses differ by more than twice
  the noise; `decision_accuracy` is the share of resolvable contrasts a prediction orders as the truth does
  (DataDecide, arXiv 2504.11393), with its binomial standard error.
- **In a search** (`rests_on`): whether the front's order at T is explained by size within the noise, and for
  the recommended config (the front's lowest predicted loss) which architecture decisions at matched cost are
  resolved and which are tied ("the cheaper one is the choice").
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace

import numpy as np

from search_spaces.residual_lm import ArchConfig, parameter_count

from .target import Answer

__all__ = [
    "KINDS",
    "MATCHED_COST",
    "Architecture",
    "Contrast",
    "Decision",
    "SizeTrend",
    "architecture_tau",
    "contrast_kind",
    "decision_accuracy",
    "differences",
    "kendall",
    "matched_contrasts",
    "rests_on",
    "search_decisions",
    "size_trend",
    "trial_facts",
]

MATCHED_COST = 0.15  # two configs within 15% of each other's executed FLOPs per token are at matched cost
KINDS = ("family", "depth vs width", "MoD", "mixed")


def kendall(a: Mapping[int, float], b: Mapping[int, float]) -> float | None:
    """Kendall tau-b over the keys both have (None below 3 of them, or without variation)."""
    from scipy.stats import kendalltau  # scipy.stats takes longer to import than most commands take to answer

    keys = sorted(set(a) & set(b))
    if len(keys) < 3:
        return None
    value = float(kendalltau([a[k] for k in keys], [b[k] for k in keys]).statistic)
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class SizeTrend:
    """loss = c0 + c1 x + c2 x^2, x = ln(params), fitted by least squares; `r2` the share of the losses'
    variance it explains."""

    coefficients: tuple[float, ...]
    r2: float

    def at(self, params: float) -> float:
        x = math.log(params)
        return float(sum(c * x**k for k, c in enumerate(self.coefficients)))

    def residuals(self, losses: Mapping[int, float], params: Mapping[int, float]) -> dict[int, float]:
        """Each config's loss minus the trend at its size (what the architecture does there)."""
        return {c: loss - self.at(params[c]) for c, loss in losses.items() if c in params}


def size_trend(losses: Mapping[int, float], params: Mapping[int, float], degree: int = 2) -> SizeTrend | None:
    """The trend of `losses` in log-parameters (module docstring); None with fewer than degree + 2 finite
    losses, or one size only. With fewer distinct sizes than the degree needs, the degree falls."""
    keys = [c for c, v in losses.items() if c in params and math.isfinite(v)]
    sizes = {params[c] for c in keys}
    degree = min(degree, len(sizes) - 1)
    if len(keys) < degree + 2 or degree < 1:
        return None
    x = np.log([params[c] for c in keys])
    y = np.array([losses[c] for c in keys])
    design = np.vander(x - x.mean(), degree + 1, increasing=True)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    fitted = design @ coef
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - fitted) ** 2)) / total if total > 0 else 1.0
    # back to powers of x itself: sum_k b_k (x - m)^k = sum_j c_j x^j
    shift = np.polynomial.polynomial.Polynomial(coef)(np.polynomial.polynomial.Polynomial([-x.mean(), 1.0]))
    return SizeTrend(tuple(float(c) for c in shift.coef), r2)


def architecture_tau(
    predicted: Mapping[int, float], truth: Mapping[int, float], params: Mapping[int, float]
) -> float | None:
    """Kendall tau-b of the two sets' residuals, each against its own size trend (over the configs both have);
    0 when one set is exactly its size trend."""
    keys = set(predicted) & set(truth) & set(params)
    fits = [size_trend({c: side[c] for c in keys}, params) for side in (predicted, truth)]
    if fits[0] is None or fits[1] is None:
        return None
    # rounded to 1e-9 nats: equal effects must tie, not differ by the fit's rounding error
    residuals = [
        {c: round(r, 9) for c, r in fit.residuals({c: side[c] for c in keys}, params).items()}
        for fit, side in zip(fits, (predicted, truth), strict=True)
    ]
    if len(keys) >= 3 and any(len(set(side.values())) == 1 for side in residuals):
        return 0.0  # one side is its size trend exactly: it knows nothing of the architecture
    return kendall(*residuals)


_ARCH_DEFAULTS = {name: f.default for name, f in ArchConfig.model_fields.items()}


@dataclass(frozen=True)
class Architecture:
    """The fields of `ArchConfig` that make an architecture (the optimiser's and the run's are not among them),
    with `ArchConfig`'s defaults. Without MoD (mod_rate 0) the other routing fields route nothing: `of` gives them
    their defaults, so that two dense configs never differ in them."""

    residual: str
    n_layers: int
    d_model: int
    n_heads: int = _ARCH_DEFAULTS["n_heads"]
    mlp_ratio: float = _ARCH_DEFAULTS["mlp_ratio"]
    mod_rate: float = _ARCH_DEFAULTS["mod_rate"]
    mod_every: int = _ARCH_DEFAULTS["mod_every"]
    mod_granularity: str = _ARCH_DEFAULTS["mod_granularity"]

    @classmethod
    def of(cls, knobs: ArchConfig | Mapping) -> Architecture:
        """From a config or its fields (an ArchConfig dump, a trial's config, a table's row); a field it lacks (or
        holds as None) takes `ArchConfig`'s default."""
        values = knobs.model_dump() if isinstance(knobs, ArchConfig) else knobs
        given = {f.name: values[f.name] for f in fields(cls) if values.get(f.name) is not None}
        arch = cls(**{**{k: _ARCH_DEFAULTS[k] for k in ("residual", "n_layers", "d_model")}, **given})
        if arch.mod_rate:
            return arch
        return replace(arch, mod_every=_ARCH_DEFAULTS["mod_every"], mod_granularity=_ARCH_DEFAULTS["mod_granularity"])

    @property
    def shape(self) -> tuple:
        return (self.n_layers, self.d_model, self.n_heads, self.mlp_ratio)

    @property
    def routing(self) -> tuple:
        return (self.mod_rate, self.mod_every, self.mod_granularity)

    def describe(self) -> str:
        mod = (
            ""
            if not self.mod_rate
            else f" MoD {self.mod_rate:g}" + (" blocks" if self.mod_granularity == "block" else "")
        )
        return f"{self.residual} {self.n_layers}x{self.d_model}{mod}"


def differences(a: Architecture, b: Architecture) -> list[str]:
    """The knobs whose values differ between two architectures, in field order."""
    return [f.name for f in fields(Architecture) if getattr(a, f.name) != getattr(b, f.name)]


def contrast_kind(a: Architecture, b: Architecture) -> str | None:
    """What differs between two architectures (module docstring); None when they are the same."""
    family, routing, shape = a.residual != b.residual, a.routing != b.routing, a.shape != b.shape
    if family and not routing and not shape:
        return "family"
    if routing and not family:
        return "MoD"
    if shape and not family:
        return "depth vs width"
    return "mixed" if family else None


@dataclass(frozen=True)
class Contrast:
    """Two configs at matched cost, and what differs between them."""

    a: int
    b: int
    kind: str


def matched_contrasts(
    archs: Mapping[int, Architecture], flops: Mapping[int, float], tolerance: float = MATCHED_COST
) -> list[Contrast]:
    """Every pair of configs of different architecture whose FLOPs per token are within `tolerance` (as a ratio)."""
    keys = sorted(c for c in archs if c in flops and math.isfinite(flops[c]) and flops[c] > 0)
    out = []
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            kind = contrast_kind(archs[a], archs[b])
            if kind is not None and max(flops[a], flops[b]) <= (1.0 + tolerance) * min(flops[a], flops[b]):
                out.append(Contrast(a, b, kind))
    return out


def decision_accuracy(
    contrasts: Sequence[Contrast], predicted: Mapping[int, float], truth: Mapping[int, float], margin: float
) -> dict[str, dict]:
    """Per kind and overall ("all"): how many contrasts the truth resolves (|gap| > `margin`), how many of them
    `predicted` orders as the truth does, the share, and its binomial standard error."""
    out: dict[str, dict] = {}
    for kind in (*KINDS, "all"):
        chosen = [c for c in contrasts if kind in ("all", c.kind) and c.a in predicted and c.b in predicted]
        resolvable = [c for c in chosen if c.a in truth and c.b in truth and abs(truth[c.a] - truth[c.b]) > margin]
        right = sum((predicted[c.a] - predicted[c.b]) * (truth[c.a] - truth[c.b]) > 0 for c in resolvable)
        n = len(resolvable)
        share = right / n if n else None
        se = math.sqrt(share * (1 - share) / n) if n else None
        out[kind] = {"contrasts": len(chosen), "resolvable": n, "right": right, "accuracy": share, "standard_error": se}
    return out


@dataclass(frozen=True)
class Decision:
    """A contrast at matched cost in a search's answer: the predicted gap (loss of `b` minus loss of `a`), the
    margin it is judged against (`Answer.margin`: the error model's call z times the gap's sd), and whether it is
    resolved."""

    contrast: Contrast
    gap: float
    margin: float | None

    @property
    def resolved(self) -> bool:
        return self.margin is not None and abs(self.gap) > self.margin

    @property
    def better(self) -> int:
        return self.contrast.a if self.gap > 0 else self.contrast.b


def search_decisions(
    answer: Answer, archs: Mapping[int, Architecture], flops: Mapping[int, float], trials: Sequence[int] | None = None
) -> list[Decision]:
    """The contrasts at matched cost among the answer's trials (or `trials`) with finite predictions, judged."""
    keys = [t for t in (trials if trials is not None else answer.predictions) if t in answer.predictions]
    keys = [t for t in keys if math.isfinite(answer.predictions[t].loss) and t in archs]
    out = []
    for c in matched_contrasts({t: archs[t] for t in keys}, flops):
        gap = answer.predictions[c.b].loss - answer.predictions[c.a].loss
        out.append(Decision(c, gap, answer.margin(c.a, c.b)))
    return out


def rests_on(
    answer: Answer,
    front: Sequence[int],
    archs: Mapping[int, Architecture],
    flops: Mapping[int, float],
    params: Mapping[int, float],
) -> list[str]:
    """What the answer rests on, in a few lines (module docstring): size against architecture over the completed
    trials, and the recommended config's decisions at matched cost. `front`: the front's trials."""
    predicted = {t: p.loss for t, p in answer.predictions.items() if math.isfinite(p.loss) and t in params}
    lines = _forecast_lines(answer)
    trend = size_trend(predicted, params)
    if trend is not None and front:
        residual = trend.residuals({t: predicted[t] for t in front if t in predicted}, params)
        margins = {t: m for t in residual if (m := _own_margin(answer, t)) is not None}
        beyond = {t: r for t, r in residual.items() if t in margins and abs(r) > margins[t]}
        share = (
            f"a trend in log-parameters explains {trend.r2:.0%} of the spread of the predicted losses at T "
            f"of {len(predicted)} trials"
        )
        if not margins:
            lines.append(f"size: {share}; without a measured seed noise no architecture effect can be told from it")
        elif not beyond:
            lines.append(f"explained by size within the noise: {share}, and every front member sits within its "
                         "margin of the trend: the front trades size, not architecture")  # fmt: skip
        else:
            t = min(beyond, key=beyond.get)
            lines.append(f"beyond size: {share}; trial {t} ({archs[t].describe()}) sits {abs(beyond[t]):.3f} nats "
                         f"{'below' if beyond[t] < 0 else 'above'} it (its margin {margins[t]:.3f})")  # fmt: skip
    best = min((t for t in front if t in predicted), key=predicted.get, default=None)
    if best is None:
        return lines
    mine = [d for d in search_decisions(answer, archs, flops) if best in (d.contrast.a, d.contrast.b)]
    if not mine:
        alone = f"trial {best} ({archs[best].describe()}) has no rival of another architecture at matched cost"
        lines.append(f"{alone} (within {MATCHED_COST:.0%} of its FLOPs per token): no architecture decision to resolve")
        return lines
    for d in sorted(mine, key=lambda d: -abs(d.gap))[:3]:
        other = d.contrast.b if d.contrast.a == best else d.contrast.a
        pair = (
            f"trial {best} ({archs[best].describe()}) vs trial {other} ({archs[other].describe()}), "
            f"{d.contrast.kind} ({_differ(differences(archs[best], archs[other]))})"
        )
        if d.margin is None:
            lines.append(f"{pair}: {abs(d.gap):.3f} nats apart; no seed noise measured, so not called resolved")
        elif d.resolved:
            loser = other if d.better == best else best
            lines.append(f"resolved at matched cost: {pair}: trial {d.better} is better by {abs(d.gap):.3f} nats "
                         f"(beyond its margin {d.margin:.3f}); trial {loser} is not the choice")  # fmt: skip
        else:
            cheaper = min((best, other), key=lambda t: flops[t])
            lines.append(f"tied at matched cost: {pair}: {abs(d.gap):.3f} nats apart, within its margin "
                         f"{d.margin:.3f}: the cheaper one, trial {cheaper}, is the choice")  # fmt: skip
    return lines


def _forecast_lines(answer: Answer) -> list[str]:
    """What the forecast rests on, a line each: the level at T, the bias taken out, the error model, and the trials
    whose top rungs are shorter than any the model was measured on."""
    lines = []
    if answer.level is not None:
        lines.append(f"level: {answer.level.describe()}")
    if answer.discrepancy is not None:
        lines.append(f"bias: {answer.discrepancy.describe()}")
    if answer.model is not None and answer.facts:
        noise = "measured" if answer.noise else f"assumed {answer.model.seed_noise:.3f} (none measured)"
        lines.append(f"certainty: {answer.model.describe()}; seed noise {noise}")
        short = {t: f.steps for t, f in answer.facts.items() if f.steps is not None and not answer.model.measured_at(f)}
        if short:
            lines.append(f"range: {_short_top_rungs(short, len(answer.facts), answer.model.top_rung_steps)}")
    return lines


def _short_top_rungs(short: Mapping[int, int], trials: int, measured: int) -> str:
    """Which trials' top rungs are shorter than any the error model was measured on (`short`: trial -> steps)."""
    steps = list(short.values())
    took = f"{min(steps)}" if min(steps) == max(steps) else f"{min(steps)} to {max(steps)}"
    if len(short) == 1:
        who, whose = f"trial {next(iter(short))} trained its", "its band and calls are"
    else:
        who = (
            "every trial trained its"
            if len(short) == trials
            else f"trials {', '.join(map(str, sorted(short)))} trained their"
        )
        whose = "their bands and calls are"
    return (
        f"{who} top rung in {took} optimizer steps, fewer than any top rung the error model was measured on "
        f"({measured}): {whose} not calibrated there"
    )


def _own_margin(answer: Answer, trial: int) -> float | None:
    """How far a trial must sit from a trend to be beyond it: the call z times its own sd; without a model,
    twice its seed noise at T."""
    p = answer.predictions.get(trial)
    if answer.model is not None and p is not None and p.relative_sd is not None:
        return answer.model.call_z * p.relative_sd
    noise = answer.noise_at_target(trial)
    return None if noise is None else 2.0 * noise


def _differ(names: Sequence[str]) -> str:
    return f"{', '.join(names)} {'differ' if len(names) > 1 else 'differs'}"


def trial_facts(rows: Sequence) -> tuple[dict[int, Architecture], dict[int, float], dict[int, float]]:
    """(architecture, executed FLOPs per token, parameter count) of each completed trial row with an architecture:
    what `rests_on` reads. The parameter count is the model's, in closed form (`parameter_count`)."""
    archs, flops, params = {}, {}, {}
    for r in rows:
        knobs = (r.config or {}).get("arch") or r.config or {}
        if str(r.status) != "completed" or "residual" not in knobs or r.executed_flops_per_token is None:
            continue
        archs[r.number] = Architecture.of(knobs)
        flops[r.number] = float(r.executed_flops_per_token)
        given = tuple(sorted((k, v) for k, v in knobs.items() if k in ArchConfig.model_fields))
        if (n := _parameters(given)) is not None:
            params[r.number] = n
    return archs, flops, params


@functools.lru_cache(maxsize=4096)
def _parameters(knobs: tuple) -> float | None:
    """The parameter count of the config with these (name, value) knobs, or None when it is not a valid config."""
    from pydantic import ValidationError

    try:
        cfg = ArchConfig(**dict(knobs))
    except ValidationError:
        return None
    return float(parameter_count(cfg))
