"""The error model's constants (`nas.answer.error_model`), measured on the fidelity corpora: each corpus graded with
constants fitted on the others, a search using those fitted on all of them.

    python -m benchmarks.trust.forecast_constants                  # -> results/forecast_constants.json
    python -m benchmarks.trust.forecast_constants --write-shipped  # and nas/answer/forecast_constants.json

Per corpus (`CorpusTables`: its truth at T, the top replica rung at T/10 narrowed as a search narrows by default,
and where built the rungs that kept the head count at every share of T, `*_keep_heads`):

- **the bias**: the top rung's error beyond size regressed on s times [family, z] (`bias_coefficients`: beta, an
  offset per family against cascaded, and the misfit the line leaves);
- **the misfit per family** in units of the rung's seed noise: the sd of a family's errors after the corpus's own
  correction and a trend in ln(parameters) are taken out, the seed noise of the top rung's mean taken off;
- **the level**: the top rung's offset from the level rungs' path at T/10 (`offset`: the default narrowing's loss
  less the keep-heads replica's, the path the level rungs take), and the exponent that carries the corpus's level
  configs to its truth (`alpha`: the level protocol of a search, `level_error`, run with the exponent held at each
  value, solved for a mean error of zero; an exponent fitted with a free floor through every config's rungs and the
  truth is reported beside it, `alpha_free`);
- **the rung's seed noise**;
- **the fewest optimizer steps of a top rung** (`top_rung_steps`): the model says nothing about top rungs shorter
  than every one it was measured on, and a search names the trials whose top rungs are.

Across corpora (`fit_model`): means; an sd from how much they disagree (beta's and each family offset's, with a
floor of a quarter of the mean's size, alpha's of 0.02, the offset's of 0.005, so that two corpora that happen to
agree are not taken as exact); misfits as root mean squares; the seed noise as the median, weighing against a
search's own repeats as the degrees of freedom nu_0 whose chi-square spread, Var(s^2) / sigma^4 = 2 / nu_0, is
the corpora's (with the same floor of a quarter); the fewest top-rung steps as the least of the corpora's; the
level's error no fit sees (`systematic_sd`) as the root mean square of the level errors the fitted protocol makes
on each corpus of the set when its constants come from the others (`level_error`: the level configs a search
picks, `nas.answer.level.choose_level_configs`, at a quarter and a third of the top rung, carried by
`nas.answer.level.fit_level`).

`held_out_models()` is what `make fidelity` grades each corpus with: the results file's `held_out` entry, which
`benchmarks.trust.fidelity report` reads as its input.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from benchmarks.harness import machine_info, read_table, write_json
from benchmarks.trust import fidelity_tables as fidelity
from benchmarks.trust.architecture import error_beyond_size
from benchmarks.trust.grading import Truth, graded_rows
from nas.answer.decisions import Architecture, size_trend
from nas.answer.discrepancy import BiasPrior, aspect
from nas.answer.error_model import CALL_Z, CONSTANTS_FILE, ErrorModel, model_from_dict
from nas.answer.extrapolate import RungPoint, budget_key, fit_study, seed_noise
from nas.answer.level import LevelCurve, LevelPoint, LevelPrior, choose_level_configs, fit_level
from workers.ladder.layout import LEVEL_SHARES

HERE = Path(__file__).resolve().parents[1]
OUT = HERE / "results" / "forecast_constants.json"
SHIPPED = HERE.parent / "nas" / "answer" / CONSTANTS_FILE
FAMILIES = ("nag", "ancre")  # offsets against cascaded
ALL_FAMILIES = ("cascaded", *FAMILIES)
LEVEL_CONFIGS = 3  # a search's default (`nas search --level-configs`)
FLOORS = {"alpha_sd": 0.02, "offset_sd": 0.005}


@dataclass
class CorpusTables:
    """One corpus's tables: its truth, the top rung (seed means and seed 0), the keep-heads rungs where built."""

    name: str

    def __post_init__(self) -> None:
        corpus = fidelity.CORPORA[self.name]
        rows, replica = graded_rows(read_table(corpus.runs), read_table(corpus.replica_runs))
        self.truth = Truth.of(rows)
        self.archs: dict[int, Architecture] = fidelity.architectures(rows, self.name)
        self.top_flops = fidelity.REPLICA_TOP_SHARE * self.truth.target
        self.top_runs: dict[int, dict[int, float]] = {}
        for r in replica:
            self.top_runs.setdefault(r["config"], {})[r["seed"]] = r["val_loss"]
        tokens_per_step = fidelity.RUN["batch_size"] * fidelity.FIXED["seq_len"]
        self.top_rung_steps = min(int(r["tokens"]) // tokens_per_step for r in replica)
        self.top_s = {r["config"]: math.log(r["d_model"] / r["replica_d_model"]) for r in replica}
        self.noise = seed_noise(
            [RungPoint(r["config"], "-", r["budget_flops"], r["val_loss"], r["seed"]) for r in replica]
        )
        self.aspects = {c: aspect(a.n_layers, a.d_model) for c, a in self.archs.items() if c in self.top_runs}
        heads = corpus.keep_heads_runs
        self.keep_heads = [] if heads is None or not heads.exists() else graded_rows(rows, read_table(heads))[1]

    @property
    def top(self) -> dict[int, float]:
        """Each config's top rung, the mean of its seeds."""
        return {c: float(np.mean(list(v.values()))) for c, v in self.top_runs.items()}

    @property
    def centre(self) -> float:
        return float(np.mean(list(self.aspects.values())))

    def design(self, configs: Sequence[int]) -> np.ndarray:
        """Per config: 1, then s times [nag, ancre, z]."""
        a, s = self.archs, self.top_s
        return np.array([[1.0, *(s[c] * float(a[c].residual == f) for f in FAMILIES), s[c] * self.aspects[c]]
                         for c in configs])  # fmt: skip

    @cached_property
    def coefficients(self) -> dict:
        """The top rung's (seed 0) error beyond size regressed on `design`: family offsets and beta per unit of s,
        and the misfit the line leaves."""
        top0 = {c: v[0] for c, v in self.top_runs.items() if 0 in v}
        residual = error_beyond_size(top0, self.truth)
        configs = sorted(residual)
        design, y = self.design(configs), np.array([residual[c] for c in configs])
        coef = np.linalg.lstsq(design, y, rcond=None)[0]
        misfit = float(np.std(y - design @ coef, ddof=design.shape[1]))
        return {"family": dict(zip(FAMILIES, map(float, coef[1:3]), strict=True)), "beta": float(coef[3]),
                "misfit": misfit}  # fmt: skip

    def corrected(self, bias: BiasPrior) -> dict[int, float]:
        """Each config's top rung (seed mean) with `bias` taken out, around this corpus's mean aspect:
        x - s (beta (z - z0) + the family offset as applied)."""
        return {c: x - self.top_s[c] * (bias.beta * (self.aspects[c] - self.centre)
                                         + bias.applied_family(self.archs[c].residual))
                for c, x in self.top.items()}  # fmt: skip

    @property
    def own_bias(self) -> BiasPrior:
        """This corpus's own bias coefficients, applied whole."""
        k = self.coefficients
        return BiasPrior(k["beta"], 0.0, dict(k["family"]), self.name)

    @cached_property
    def misfit_ratio(self) -> dict[str, float]:
        """Per family: the sd of the top rung's errors (seed means) after this corpus's own correction and a
        linear trend in ln(parameters), the seed noise of the mean taken off, in units of the rung's seed noise."""
        k, centre, noise = self.coefficients, self.centre, self.noise or 0.02
        error = {}
        for c, x in self.top.items():
            offset = k["family"].get(self.archs[c].residual, 0.0)
            error[c] = x - self.top_s[c] * (k["beta"] * (self.aspects[c] - centre) + offset) - self.truth.loss[c]
        trend = size_trend(error, self.truth.params, degree=1)
        residual = trend.residuals(error, self.truth.params) if trend is not None else error
        out = {}
        for family in ALL_FAMILIES:
            mine = [(residual[c], len(self.top_runs[c])) for c in residual if self.archs[c].residual == family]
            if len(mine) < 3:
                continue
            spread = float(np.mean([r * r for r, _ in mine])) - float(np.mean([noise**2 / n for _, n in mine]))
            out[family] = math.sqrt(max(spread, 0.0)) / noise
        return out

    @cached_property
    def alpha(self) -> float | None:
        """The exponent under which the level protocol carries this corpus's top rungs to its truth with a mean
        error of zero (bisection on [0.03, 0.6]; None without keep-heads rungs or where no exponent does)."""
        offset = self.offset if self.offset is not None else 0.0

        def error(alpha: float) -> float | None:
            return level_error(self, LevelPrior(alpha, 1e-4, offset), self.noise or 0.02, self.own_bias)

        low, high = 0.03, 0.6
        at_low, at_high = error(low), error(high)
        if at_low is None or at_high is None or at_low * at_high > 0:
            return None
        for _ in range(30):  # the floor refits at each exponent: the mean error changes sign once on this range
            mid = (low + high) / 2
            at_mid = error(mid)
            assert at_mid is not None
            low, high = (mid, high) if at_mid * at_low > 0 else (low, mid)
        return (low + high) / 2

    @cached_property
    def alpha_free(self) -> float | None:
        """The exponent of one shared curve through every config's on-path keep-heads rungs and its truth."""
        points = [RungPoint(r["config"], "path", r["budget_flops"], r["val_loss"], r["seed"])
                  for r in self.keep_heads if r["on_path"]]  # fmt: skip
        if not points:
            return None
        points += [RungPoint(c, "path", self.truth.target, x, s) for c, v in self.truth.runs.items()
                   for s, x in enumerate(v)]  # fmt: skip
        fit = fit_study(points)
        return next(iter(fit.groups.values())).alpha if fit.groups else None

    @cached_property
    def offset(self) -> float | None:
        """The top rung's mean offset from the keep-heads replica at the same budget (both seed means)."""
        at = self.keep_heads_at(self.top_flops)
        common = [c for c in self.top if c in at]
        return float(np.mean([self.top[c] - at[c] for c in common])) if common else None

    def keep_heads_at(self, flops: float, seed: int | None = None) -> dict[int, float]:
        """Each config's keep-heads rung at `flops` (the mean of its seeds, or one seed)."""
        runs: dict[int, list[float]] = {}
        for r in self.keep_heads:
            if budget_key(r["budget_flops"]) == budget_key(flops) and (seed is None or r["seed"] == seed):
                runs.setdefault(r["config"], []).append(r["val_loss"])
        return {c: float(np.mean(v)) for c, v in runs.items()}

    def on_path_at(self, flops: float) -> set[int]:
        return {r["config"] for r in self.keep_heads if budget_key(r["budget_flops"]) == budget_key(flops)
                and r["on_path"]}  # fmt: skip


def level_error(corpus: CorpusTables, prior: LevelPrior, noise: float, bias: BiasPrior) -> float | None:
    """The mean level error (prediction minus truth over every config) of the level protocol on `corpus`: the
    configs a search picks, their keep-heads rungs (seed 0) at LEVEL_SHARES of the top rung and their top rung,
    every top rung carried to T with `bias` taken out as a search takes it out (`nas.answer.forecast`)."""
    budgets = [corpus.top_flops * share for share in LEVEL_SHARES]
    if not corpus.keep_heads or not all(corpus.keep_heads_at(b, 0) for b in budgets):
        return None
    eligible = corpus.on_path_at(min(budgets)) & set(corpus.top)
    chosen = choose_level_configs({c: corpus.truth.params[c] for c in eligible}, LEVEL_CONFIGS)
    points = [LevelPoint(c, b, corpus.keep_heads_at(b, 0)[c]) for c in chosen for b in budgets]
    top = {c: LevelPoint(c, corpus.top_flops, corpus.top[c], len(corpus.top_runs[c])) for c in chosen}
    curve = fit_level(points, top, noise, prior)
    if not isinstance(curve, LevelCurve):
        return None
    errors = [curve.carry(x, corpus.truth.target)[0] - corpus.truth.loss[c] for c, x in corpus.corrected(bias).items()]
    return float(np.mean(errors))


def _spread(values: Sequence[float], floor: float = 0.0) -> float:
    """How much the corpora disagree: the sd of their values (ddof 1), at least `floor`."""
    return max(float(np.std(values, ddof=1)) if len(values) > 1 else 0.0, floor)


def fit_model(corpora: Sequence[CorpusTables], nested: bool = True) -> dict:
    """The constants fitted on `corpora` (module docstring), as the JSON `model_from_dict` reads."""
    coefs = [c.coefficients for c in corpora]
    betas = [k["beta"] for k in coefs]
    family = {f: float(np.mean([k["family"][f] for k in coefs])) for f in FAMILIES}
    family_sd = {f: _spread([k["family"][f] for k in coefs], abs(family[f]) / 4) for f in FAMILIES}
    ratios = {f: math.sqrt(np.mean([c.misfit_ratio[f] ** 2 for c in corpora if f in c.misfit_ratio]))
              for f in ALL_FAMILIES}  # fmt: skip
    alphas = [c.alpha for c in corpora if c.alpha is not None]
    offsets = [c.offset for c in corpora if c.offset is not None]
    noise = float(np.median([c.noise for c in corpora if c.noise]))
    variances = [c.noise**2 for c in corpora if c.noise]
    relative = _spread(variances, np.mean(variances) / 4) / float(np.mean(variances))
    level = {
        "alpha": float(np.mean(alphas)) if alphas else LevelPrior().alpha,
        "alpha_sd": _spread(alphas, FLOORS["alpha_sd"]),
        "offset": float(np.mean(offsets)) if offsets else 0.0,
        "offset_sd": _spread(offsets, FLOORS["offset_sd"]),
        "systematic_sd": 0.0,
    }
    if nested and len(corpora) > 1:  # each corpus of the set read with constants from the others
        errors = []
        for c in corpora:
            others = fit_model([o for o in corpora if o is not c], nested=False)
            held = model_from_dict(others)
            if (e := level_error(c, held.level, c.noise or noise, held.bias)) is not None:
                errors.append(e)
        level["systematic_sd"] = math.sqrt(float(np.mean(np.square(errors)))) if errors else 0.0
    return {
        "source": " + ".join(c.name for c in corpora),
        "bias": {
            "beta": float(np.mean(betas)),
            "beta_sd": _spread(betas, abs(float(np.mean(betas))) / 4),
            "family": family,
            "family_sd": family_sd,
            "misfit": math.sqrt(float(np.mean([k["misfit"] ** 2 for k in coefs]))),
        },  # fmt: skip
        "misfit_ratio": ratios,
        "default_ratio": max(ratios.values()),
        "seed_noise": noise,
        "seed_noise_dof": 2.0 / relative**2,
        "level": level,
        "call_z": CALL_Z,
        "top_rung_steps": min(c.top_rung_steps for c in corpora),
    }


def per_corpus(corpus: CorpusTables) -> dict:
    """What one corpus measures on its own (its row of the results)."""
    return {
        "bias": corpus.coefficients,
        "misfit_ratio": corpus.misfit_ratio,
        "alpha": corpus.alpha,
        "alpha_free": corpus.alpha_free,
        "offset": corpus.offset,
        "seed_noise": corpus.noise,
        "truth_seed_noise": corpus.truth.noise,
        "top_rung_steps": corpus.top_rung_steps,
    }


def report(names: Sequence[str], out: Path) -> dict:
    """Every corpus's own figures, the model held out for each, and the model fitted on all of them."""
    loaded = [CorpusTables(n) for n in names]
    result = {
        "per_corpus": {c.name: per_corpus(c) for c in loaded},
        "held_out": {c.name: fit_model([o for o in loaded if o is not c]) for c in loaded} if len(loaded) > 1 else {},
        "shipped": fit_model(loaded),
        "machine": machine_info(),
    }
    write_json(out, result)
    return result


def held_out_models(path: Path = OUT) -> dict[str, ErrorModel]:
    """The model each corpus is graded with (fitted on the other corpora), read from the results file."""
    if not path.exists():
        return {}
    return {name: model_from_dict(raw) for name, raw in json.loads(path.read_text())["held_out"].items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--corpus", choices=sorted(fidelity.CORPORA), action="append", help="default: every corpus")
    parser.add_argument("--write-shipped", action="store_true", help=f"also write the shipped model to {SHIPPED}")
    args = parser.parse_args()
    result = report(args.corpus or [n for n, c in fidelity.CORPORA.items() if fidelity.ready(c)], args.out)
    if args.write_shipped:
        SHIPPED.write_text(json.dumps(result["shipped"], indent=2) + "\n")
    print(json.dumps({"shipped": result["shipped"], "held_out": result["held_out"]}, indent=2))


if __name__ == "__main__":
    main()
