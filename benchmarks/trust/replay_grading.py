"""A search replayed on a table (`benchmarks.trust.replay.SearchReplay`) and graded against the configs trained at T:
its ranking (`benchmarks.trust.grading.grade`), its compute, its level at T, its bands, and its calls at matched
cost; in one arrival order (`graded_replay`) and over `ORDERS` of them (`over_orders`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from benchmarks.trust.grading import BAND_GAMMAS, ORDERS, Truth, bands_of, bands_with, grade
from benchmarks.trust.replay import SearchReplay
from nas.answer.decisions import matched_contrasts
from nas.answer.error_model import BAND_Z
from nas.answer.target import Answer

__all__ = ["arrival_orders", "call_grade", "graded_replay", "over_orders"]


def graded_replay(
    rows, truth: Truth, budgets, eta: float, order: Sequence[int], archs: Mapping | None = None, **search_options
) -> dict:
    """One search replayed on the table (`SearchReplay`, `search_options` its further fields: `replica`,
    `noise_rule`, `anchor_rows`, `anchors`, `model`, `level_rows`, `level_configs`), configs arriving in `order`;
    graded, with its compute, its level at T and (given each config's architecture) its calls at matched cost."""
    search = SearchReplay(rows, budgets, eta, truth.target, **search_options)
    try:
        answer = search.run(order)
        predicted = search.estimates(answer)
        bands = search.by_config(bands_of(answer))
        reached = search.reached()
        level = search.level_error(answer, truth)
        return grade(predicted, truth, bands) | {
            "at_target": answer.at_target,
            "level": answer.level.describe() if answer.level is not None else None,
            "level_error_mean": None if level is None or not answer.at_target else level[0],
            "level_error_mae": None if level is None or not answer.at_target else level[1],
            "level_configs": search.levelled,
            "band_half_width": _half_width(answer),
            "band_coverage_about_the_level": _coverage_about_the_level(answer, search, truth),
            **(call_grade(answer, search, truth, archs) if archs is not None else {}),
            "compute_share": search.spent / truth.compute,
            "configs_per_rung_reached": {
                str(k): sum(v == k for v in reached.values()) for k in range(1, len(budgets) + 1)
            },
            "predictor": answer.backtest.chosen,
            "backtest": answer.backtest.describe(),
            "bands": answer.calibration.describe(),
            "band_coverage_by_gamma": {
                str(g): grade(predicted, truth, search.by_config(bands_with(answer, truth.target, g)))["band_coverage"]
                for g in BAND_GAMMAS
            },
            "reliability": {f"{b:.3g}": r.tau for b, r in answer.reliability.items()},
            "seed_noise": answer.noise,
            "anchors": search.anchored,
            "discrepancy": answer.discrepancy.describe() if answer.discrepancy else None,
            "predicted": predicted,
        }
    finally:
        search.close()


def arrival_orders(configs: Sequence[int]) -> list[list[int]]:
    """The table's order and ORDERS - 1 random permutations of it (seeded): the orders every replay is run in."""
    rng = np.random.default_rng(0)
    ordered = sorted(configs)
    return [ordered] + [[int(c) for c in rng.permutation(ordered)] for _ in range(ORDERS - 1)]


def over_orders(rows, truth: Truth, budgets, eta: float, **search_options) -> dict:
    """The replay in table order, and its figures averaged over ORDERS arrival orders (table order first)."""
    orders = arrival_orders(list(truth.runs))
    runs = [graded_replay(rows, truth, budgets, eta, order, **search_options) for order in orders]
    keys = (
        "kendall_tau",
        "regret_in_seed_noise",
        "hypervolume_ratio_nadir",
        "band_coverage",
        "compute_share",
        "level_error_mean",
        "level_error_mae",
        "resolved_call_accuracy",
        "resolved_share_of_truth_resolvable",
    )
    keys = tuple(k for k in keys if any(k in r for r in runs))
    mean = {k: _mean([r.get(k) for r in runs]) for k in keys}
    mean["true_best_in_predicted_top3"] = float(np.mean([r["true_best_in_predicted_top3"] for r in runs]))
    mean["band_coverage_by_gamma"] = {
        g: _mean([r["band_coverage_by_gamma"][g] for r in runs]) for g in runs[0]["band_coverage_by_gamma"]
    }
    mean["kendall_tau_min"] = float(min(r["kendall_tau"] for r in runs))
    return {
        "table_order": runs[0],
        f"mean_over_{ORDERS}_orders": mean,
        "per_order_predicted": [r["predicted"] for r in runs],
    }


def _mean(values) -> float | None:
    """The mean of the values that are not None (None if none is)."""
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def call_grade(answer: Answer, search: SearchReplay, truth: Truth, archs: Mapping) -> dict:
    """The answer's calls at matched cost graded against the truth: of the pairs within `MATCHED_COST` FLOPs per
    token it calls resolved (`Answer.margin`), the share whose order the truth's mean shares; of the pairs the
    truth resolves (gap beyond twice its seed noise), the share the answer resolves the right way."""
    trial = {c: n for n, c in enumerate(search.arrivals)}
    keys = [c for c in truth.loss if c in trial and trial[c] in answer.predictions and c in archs]
    calls = right = resolvable = found = 0
    for pair in matched_contrasts({c: archs[c] for c in keys}, truth.flops):
        a, b = trial[pair.a], trial[pair.b]
        gap = answer.predictions[a].loss - answer.predictions[b].loss
        true_gap = truth.loss[pair.a] - truth.loss[pair.b]
        margin = answer.margin(a, b)
        called = margin is not None and abs(gap) > margin
        calls, right = calls + called, right + (called and gap * true_gap > 0)
        if truth.noise is not None and abs(true_gap) > 2.0 * truth.noise:
            resolvable, found = resolvable + 1, found + (called and gap * true_gap > 0)
    return {
        "resolved_calls": calls,
        "resolved_call_accuracy": right / calls if calls else None,
        "truth_resolvable": resolvable,
        "resolved_share_of_truth_resolvable": found / resolvable if resolvable else None,
    }


def _coverage_about_the_level(answer: Answer, search: SearchReplay, truth: Truth) -> float | None:
    """The share of configs whose error, less the corpus's mean error, lies within the 80% band of their own part
    (`Prediction.relative_sd`, with the truth's seed-mean noise): whether the bands hold config by config, apart
    from the one draw of the level a corpus makes (None without a model or a measured truth noise)."""
    if answer.model is None or truth.noise is None:
        return None
    kept = {c: p for c, p in search.by_config(answer.predictions).items()
            if c in truth.loss and p.relative_sd is not None and np.isfinite(p.loss)}  # type: ignore[attr-defined]  # fmt: skip
    if not kept:
        return None
    errors = {c: p.loss - truth.loss[c] for c, p in kept.items()}  # type: ignore[attr-defined]
    centre = float(np.mean(list(errors.values())))
    seeds = {c: len(v) for c, v in truth.runs.items()}
    inside = [abs(e - centre) <= BAND_Z * math.hypot(kept[c].relative_sd, truth.noise / math.sqrt(seeds.get(c, 1)))
              for c, e in errors.items()]  # type: ignore[attr-defined]  # fmt: skip
    return float(np.mean(inside))


def _half_width(answer: Answer) -> float | None:
    """The median half-width of the answer's 80% bands (None without bands)."""
    widths = [(p.high - p.low) / 2.0 for p in answer.predictions.values() if p.low is not None and p.high is not None]
    return float(np.median(widths)) if widths else None
