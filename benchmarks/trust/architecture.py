"""Grading a ranking at the target apart from size: what `benchmarks.trust.fidelity` and
`benchmarks.trust.replica_bias` report beside Kendall tau (`nas.answer.decisions` holds the maths).

- `size_baselines`: the rankings a user gets without a search, from the stored counts: by parameters (bigger
  better), by executed FLOPs per token (bigger better), the smallest config first, and the config nearest 20
  training tokens per parameter at T first (the compute-optimal rule of thumb). Each graded by `grading.grade`.
- `architecture_grade`: a ranking's Kendall tau, its architecture tau (both sides' size trend in log-parameters
  removed) and its decision accuracy on the matched-cost contrasts the truth resolves (gap above twice the truth's
  seed noise), overall and by kind of contrast.
- `truth_ceilings`: the truth's own seed 0 against seed 1 on the same figures, and the ceilings of a perfect
  predictor against the mean of the truth's seeds (what a view is graded against), corrected for seed noise.
- `bias`: a ranking's error against the truth (prediction minus truth, per config), its own size trend removed:
  its spread against what seed noise alone gives, and its mean by family and by depth.
- `aspect_slope`, `corrected`: the slope of a view's error in ln(depth / width) of the target, and a view with
  that slope taken out (`benchmarks.trust.replica_bias` fits it on one corpus and reads it on the other).
- `lr_sweep`: the best learning rate by family of a sweep's rows.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from benchmarks.trust.grading import Truth, grade, losses_at, rung_rows, tau
from nas.answer.decisions import Architecture, architecture_tau, decision_accuracy, matched_contrasts, size_trend
from nas.answer.extrapolate import RungPoint, seed_noise
from nas.answer.target import Answer, answer_at_target

__all__ = [
    "ANSWER_VIEW",
    "architecture_grade",
    "bias",
    "aspect_slope",
    "corrected",
    "lr_sweep",
    "summary",
    "fidelity_section",
    "headline",
    "size_baselines",
    "truth_ceilings",
    "weighed",
]

TOKENS_PER_PARAM_RULE = 20.0
ANSWER_VIEW = "answer as a search runs it (default layout and anchors, table order)"
SUMMARY_KEYS = ("kendall_tau", "architecture_tau", "decision_accuracy", "decision_se", "resolvable", "regret_nats")


def size_baselines(truth: Truth, tokens: Mapping[int, float]) -> dict:
    """The size rules (module docstring), each graded against the truth; `tokens`: each config's tokens at T."""
    rules = {
        "parameters (bigger better)": {c: -float(n) for c, n in truth.params.items()},
        "FLOPs per token (bigger better)": {c: -float(f) for c, f in truth.flops.items()},
        "pick the smallest (fewest parameters)": {c: float(n) for c, n in truth.params.items()},
        f"nearest {TOKENS_PER_PARAM_RULE:g} tokens per parameter": {
            c: abs(math.log(tokens[c] / truth.params[c] / TOKENS_PER_PARAM_RULE)) for c in truth.params
        },
    }
    return {name: grade(ranking, truth) for name, ranking in rules.items()}


def architecture_grade(predicted: Mapping[int, float], truth: Truth, archs: Mapping[int, Architecture]) -> dict:
    """Tau, regret, architecture tau and decision accuracy of `predicted` (config -> loss at T) against the truth."""
    graded = grade(predicted, truth)
    accuracy = _accuracy(predicted, truth.loss, truth, archs)
    return {
        "kendall_tau": graded["kendall_tau"],
        "regret_nats": graded["regret_nats"],
        "regret_in_seed_noise": graded["regret_in_seed_noise"],
        "true_best_in_predicted_top3": graded["true_best_in_predicted_top3"],
        "architecture_tau": architecture_tau(predicted, truth.loss, truth.params),
        "decision_accuracy": accuracy["all"]["accuracy"],
        "decision_se": accuracy["all"]["standard_error"],
        "resolvable": accuracy["all"]["resolvable"],
        "decisions_by_kind": accuracy,
    }


def _accuracy(predicted, true, truth: Truth, archs) -> dict:
    contrasts = matched_contrasts({c: archs[c] for c in true}, truth.flops)
    return decision_accuracy(contrasts, predicted, true, 2.0 * (truth.noise or 0.0))


def truth_ceilings(truth: Truth, archs: Mapping[int, Architecture]) -> dict:
    """Seed 0 against seed 1 of the truth: tau, architecture tau and decision accuracy (seed 0 ordering the
    contrasts that seed 1 resolves): what one more truth run would agree. And `for_the_seed_mean`: the same
    figures of a perfect predictor (each config's expected loss) against the mean of the truth's seeds, which is
    what every view is graded against (`mean_ceilings`)."""
    seeds = [{c: v[s] for c, v in truth.runs.items() if len(v) > s} for s in (0, 1)]
    accuracy = _accuracy(seeds[0], seeds[1], truth, archs)
    return {
        "kendall_tau": tau(seeds[0], seeds[1]),
        "architecture_tau": architecture_tau(seeds[0], seeds[1], truth.params),
        "decision_accuracy": accuracy["all"]["accuracy"],
        "resolvable": accuracy["all"]["resolvable"],
        "size_trend_r2": _r2(truth.loss, truth.params),
        "resolvable_contrasts": {
            k: v["resolvable"] for k, v in _accuracy(truth.loss, truth.loss, truth, archs).items()
        },
        "for_the_seed_mean": mean_ceilings(truth, archs),
    }


def _greiner(reliability: float) -> float:
    """Kendall tau of a Gaussian score with its noisy measurement, given the share of the measurement's variance
    that is signal: tau = (2 / pi) arcsin(sqrt(reliability)) (Greiner's relation)."""
    return 2.0 / math.pi * math.asin(math.sqrt(min(1.0, max(0.0, reliability))))


def mean_ceilings(truth: Truth, archs: Mapping[int, Architecture]) -> dict:
    """What a perfect predictor of each config's expected loss reaches against the mean of the truth's n seeds,
    estimated from the truth's seed noise s: tau from the spread of the means (`Truth.tau_ceiling`); architecture
    tau from the spread of their residuals after the size trend, sd_r, the same way (reliability 1 - s^2 / (n
    sd_r^2)); decision accuracy as the mean over the resolvable contrasts of Phi(|gap| / (s sqrt(2 / n))), the chance
    that the mean of n seeds orders a pair as its expected losses do, with the observed gap for the expected one
    (an upper estimate: resolvable gaps are selected for size)."""
    noise = truth.noise
    n = float(np.mean([len(v) for v in truth.runs.values()]))
    trend = size_trend(truth.loss, truth.params)
    out: dict = {"kendall_tau": truth.tau_ceiling(), "architecture_tau": None, "decision_accuracy": None}
    if noise is None or trend is None:
        return out
    residual = list(trend.residuals(truth.loss, truth.params).values())
    spread = float(np.std(residual, ddof=1))
    if spread > 0:
        out["architecture_tau"] = _greiner(1.0 - noise**2 / (n * spread**2))
    true = truth.loss
    contrasts = matched_contrasts({c: archs[c] for c in true}, truth.flops)
    gaps = [abs(true[c.a] - true[c.b]) for c in contrasts if abs(true[c.a] - true[c.b]) > 2.0 * noise]
    if gaps:
        sd = noise * math.sqrt(2.0 / n)
        out["decision_accuracy"] = float(np.mean([0.5 * math.erfc(-g / sd / math.sqrt(2.0)) for g in gaps]))
    return out


def _r2(losses, params) -> float | None:
    trend = size_trend(losses, params)
    return None if trend is None else trend.r2


def error_beyond_size(predicted: Mapping[int, float], truth: Truth) -> dict[int, float]:
    """Each config's error (prediction minus truth) less the error's own trend in log-parameters."""
    error = {c: predicted[c] - truth.loss[c] for c in truth.loss if c in predicted}
    trend = size_trend(error, truth.params)
    return trend.residuals(error, truth.params) if trend is not None else error


def bias(predicted: Mapping[int, float], truth: Truth, archs: Mapping[int, Architecture], noise: float | None) -> dict:
    """The error of `predicted` per config, its size trend removed (module docstring); `noise`: the seed noise of
    one `predicted` value, with the truth's (of a mean of its seeds) the spread seed noise alone would give."""
    residual = error_beyond_size(predicted, truth)
    seeds = float(np.mean([len(v) for v in truth.runs.values()]))
    expected = math.sqrt((noise or 0.0) ** 2 + (truth.noise or 0.0) ** 2 / seeds)
    by: dict[str, dict] = {"family": defaultdict(list), "depth": defaultdict(list)}
    for c, r in residual.items():
        by["family"][archs[c].residual].append(r)
        by["depth"][str(archs[c].n_layers)].append(r)
    return {
        "residual_sd": float(np.std(list(residual.values()), ddof=1)),
        "expected_from_seed_noise": expected,
        "mean_by": {k: {g: float(np.mean(v)) for g, v in sorted(groups.items())} for k, groups in by.items()},
    }


def weighed(answers: Sequence[Answer]) -> dict[int, float]:
    """Several views' predictions at T of each trial, weighed by the inverse of each view's own backtest error
    (the mean squared error of its chosen predictor on its held-out highest rungs): chosen without the truth."""
    weights = []
    for answer in answers:
        errors = [h.error(answer.backtest.chosen) ** 2 for h in answer.backtest.held_out]
        weights.append(1.0 / float(np.mean(errors)) if errors and np.mean(errors) > 0 else 0.0)
    common = set.intersection(*(set(a.predictions) for a in answers))
    total = sum(weights) or 1.0
    return {t: sum(w * a.predictions[t].loss for w, a in zip(weights, answers, strict=True)) / total for t in common}


def fidelity_section(
    truth: Truth,
    archs: Mapping[int, Architecture],
    tokens: Mapping[int, float],
    answers: Mapping[str, Mapping[int, float]],
    replica: Sequence[dict],
    replica_budgets: Sequence[float],
    ladder: Sequence[dict] = (),
    ladder_budgets: Sequence[float] = (),
) -> dict:
    """`make fidelity`'s figures apart from size, on one corpus: the truth's ceilings, the size rules, and each
    view graded (`answers`: the search's answers as a search runs it, by name, each config -> loss at T, the
    table order's under ANSWER_VIEW and one per arrival order under names that start with it); beside them the top
    replica rung alone and, where the corpus has a budget ladder, its views."""
    top = max(replica_budgets)
    seeds = [losses_at(replica, top, s) for s in (0, 1)]
    both = {c: (seeds[0][c] + seeds[1][c]) / 2 for c in seeds[0] if c in seeds[1]}
    views = {
        **answers,
        "top replica rung alone, seed 0": seeds[0],
        "top replica rung, mean of both seeds (twice its compute)": both,
    }
    if ladder:
        replayed = [answer_at_target(rung_rows(rows, budgets, (0,)), truth.target)
                    for rows, budgets in ((replica, replica_budgets), (ladder, ladder_budgets))]  # fmt: skip
        views["budget-ladder top rung alone (full width), seed 0"] = losses_at(ladder, max(ladder_budgets))
        views["replica and budget-ladder answers (every rung, seed 0) weighed by their backtests"] = weighed(replayed)
    noise = seed_noise([RungPoint(r["config"], "-", r["budget_flops"], r["val_loss"], r["seed"]) for r in replica
                        if r["budget_flops"] == top])  # fmt: skip
    graded = {name: architecture_grade(p, truth, archs) for name, p in views.items()}
    orders = [g for name, g in graded.items() if name.startswith(f"{ANSWER_VIEW}, arrival order")]
    return {
        "truth_ceilings": truth_ceilings(truth, archs),
        "size_baselines": size_baselines(truth, tokens),
        "views": graded,
        "answer_mean_over_orders": _mean_grade(orders) if orders else None,
        "bias_of_the_top_replica_rung": bias(both, truth, archs, noise / math.sqrt(2) if noise else None),
    }


def _mean_grade(grades: Sequence[dict]) -> dict:
    """The mean of the headline figures of several grades (one per arrival order)."""
    keys = ("kendall_tau", "architecture_tau", "decision_accuracy", "regret_nats")
    return {k: float(np.mean([g[k] for g in grades if g[k] is not None])) for k in keys} | {"orders": len(grades)}


def headline(section: dict) -> dict:
    """The answer's figures apart from size beside the best size rule and the truth's."""
    answer = section["views"][ANSWER_VIEW]
    best = max(section["size_baselines"], key=lambda k: section["size_baselines"][k]["kendall_tau"] or -1.0)
    mean = section["answer_mean_over_orders"] or {}
    return {
        "best_size_rule": best,
        "best_size_rule_kendall_tau": section["size_baselines"][best]["kendall_tau"],
        "architecture_tau": answer["architecture_tau"],
        "architecture_tau_mean_over_orders": mean.get("architecture_tau"),
        "decision_accuracy_mean_over_orders": mean.get("decision_accuracy"),
        "decisions_by_kind": {
            k: {"accuracy": v["accuracy"], "standard_error": v["standard_error"], "resolvable": v["resolvable"]}
            for k, v in answer["decisions_by_kind"].items()
        },
        "architecture_tau_ceiling_seed_vs_seed": section["truth_ceilings"]["architecture_tau"],
        "architecture_tau_ceiling": section["truth_ceilings"]["for_the_seed_mean"]["architecture_tau"],
        "decision_accuracy": answer["decision_accuracy"],
        "decision_accuracy_se": answer["decision_se"],
        "resolvable_contrasts": answer["resolvable"],
    }


def summary(graded: Mapping) -> dict:
    """The headline figures of an `architecture_grade`."""
    return {k: graded[k] for k in SUMMARY_KEYS}


def aspect_slope(predicted: Mapping[int, float], truth: Truth, archs: Mapping[int, Architecture]) -> float:
    """The slope of a view's error (its size trend removed) in ln(depth / width) of the target, nats per unit."""
    residual = error_beyond_size(predicted, truth)
    keys = sorted(residual)
    x = [math.log(archs[c].n_layers / archs[c].d_model) for c in keys]
    return float(np.polyfit(x, [residual[c] for c in keys], 1)[0])


def corrected(predicted: Mapping[int, float], archs: Mapping[int, Architecture], slope: float) -> dict[int, float]:
    return {c: p - slope * math.log(archs[c].n_layers / archs[c].d_model) for c, p in predicted.items()}


def lr_sweep(rows: Sequence[dict]) -> dict:
    """Per corpus, view and family: the loss of each config at each rate, and the best rate of the family (the
    lowest mean loss over its configs)."""
    table: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list))))
    for r in rows:
        table[r["corpus"]][r["view"]][r["residual"]][f"{r['lr']:g}"].append(r["val_loss"])
    return {
        corpus: {
            view: {
                family: {
                    "mean_loss": {lr: float(np.mean(v)) for lr, v in sorted(rates.items())},
                    "best_lr": min(rates, key=lambda lr: np.mean(rates[lr])),
                }  # fmt: skip
                for family, rates in families.items()
            }
            for view, families in views.items()
        }
        for corpus, views in table.items()
    }
