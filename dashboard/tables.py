"""The dashboard's tables: store rows as flat `pandas.DataFrame`s, one row per trial or per search.

`trials_frame` holds every trial with its flat config (`TRIAL_COLUMNS`, then the other sampled knobs),
`searches_frame` one row per search with its counts and hypervolume, `target_frame` each trial's prediction
at the target budget T, and `fidelity_benchmark_frame` the fidelity benchmark's figures beside their goals.
Pure functions; no Streamlit, no store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from nas.answer.pareto import hypervolume, pareto_rows, reference_point
from nas.answer.target import Prediction, front_at_target
from nas.space.objectives import decode_flops_of, kv_bytes_of

from .cost import COUNTED, CostAxis, cost_ratios, seconds_per_token
from .style import format_number, group_label, trial_lr

__all__ = ["TRIAL_COLUMNS", "fidelity_benchmark_frame", "searches_frame", "target_frame", "trials_frame"]

TRIAL_COLUMNS = (
    "number",
    "status",
    "residual",
    "n_layers",
    "d_model",
    "n_heads",
    "mod_rate",
    "lr",
    "val_loss",
    "val_bpb",
    "executed_flops_per_token",
    "nominal_flops_per_token",
    "realised_flops_per_token",
    "kv_bytes_per_token",
    "decode_flops_per_token",
    "tokens_seen",
    "training_flops",
    "wall_time_s",
    "tokens_per_s",
    "measured_s_per_token",
    "cost_ratio",
    "attempt",
    "failure_reason",
    "on_front",
    "trial_id",
)
_CONFIG_NOISE = {"arch", "optim", "run", "optuna_number", "infeasible_reason", "executed_flops_per_token"}


def _config_params(row) -> dict:
    """The flat sampled knobs of the config that are not already a column (mlp_ratio, warmup, ...)."""
    return {
        k: v
        for k, v in row.config.items()
        if k not in _CONFIG_NOISE and k not in TRIAL_COLUMNS and isinstance(v, (int, float, str, bool))
    }


def trials_frame(rows: Sequence, axis: CostAxis = COUNTED) -> pd.DataFrame:
    """One row per trial, flat columns (`TRIAL_COLUMNS`, then the other sampled knobs), by number.

    `measured_s_per_token` is the training step's seconds per token and `cost_ratio` the trial's measured over
    counted cost with the median among `rows` 1 (`dashboard.cost`); `on_front` is on `axis`.
    """
    front = {r.id for r in pareto_rows(rows, key=axis.of)}
    ratios = cost_ratios(rows)
    records = []
    for r in sorted(rows, key=lambda r: r.number):
        record = {name: getattr(r, name, None) for name in TRIAL_COLUMNS}
        record.update(
            lr=trial_lr(r),
            measured_s_per_token=seconds_per_token(r),
            kv_bytes_per_token=kv_bytes_of(r),  # stored, or counted from an older row's config
            decode_flops_per_token=decode_flops_of(r),
            cost_ratio=ratios.get(r.id),
            on_front=r.id in front,
            trial_id=r.id,
        )
        records.append({**record, **_config_params(r)})
    frame = pd.DataFrame.from_records(records, columns=None if records else list(TRIAL_COLUMNS))
    for name in frame.columns[len(TRIAL_COLUMNS) :]:  # a knob with mixed types would not convert to Arrow
        if len({type(v) for v in frame[name].dropna()}) > 1:
            frame[name] = frame[name].map(lambda v: None if v is None else str(v))
    return frame.reset_index(drop=True)


def searches_frame(
    summaries: Sequence, searches: Mapping[str, Any], rows_by_search: Mapping[str, Sequence]
) -> pd.DataFrame:
    """One row per search: status, budget, trial counts, tokenizer, best loss (nats per token and bits per
    byte: only the latter compares searches with different tokenizers) and hypervolume with its reference
    point.

    "done" counts finished trials (completed, diverged, stopped, infeasible) as `nas list` does.
    """
    records = []
    for s in summaries:
        budget = getattr(searches.get(s.name), "budget", None) or {}
        corpus = (getattr(searches.get(s.name), "settings", None) or {}).get("corpus") or {}
        rows = rows_by_search.get(s.name, [])
        ref = reference_point(rows)
        records.append(
            dict(
                search=s.name,
                status=s.status,
                created=s.created_at,
                trial_flops=budget.get("trial_flops"),
                search_flops=budget.get("search_flops"),
                requested=s.requested_trials,
                done=s.completed + s.other,
                completed=s.completed,
                failed=s.failed,
                running=s.running,
                tokenizer=corpus.get("tokenizer_spec", "bytes"),
                best_val_loss=s.best_val_loss,
                best_val_bpb=s.best_val_bpb,
                on_front=len(pareto_rows(rows)),
                hypervolume=hypervolume(rows, ref),
                reference_point=f"loss {ref[0]:.4f}, FLOPs/token {ref[1]:.4g}",
            )
        )
    return pd.DataFrame.from_records(records)


# The headline figures of `make fidelity` (benchmarks/trust/fidelity.py `headline`), as rows: (label, key, goal key)
_FIDELITY_FIGURES = (
    ("Kendall tau: the answer at T, as a search runs it", "kendall_tau", "kendall_tau"),
    ("Kendall tau: the same, mean over arrival orders", "kendall_tau_mean_over_orders", None),
    ("Kendall tau: the top rung alone (every config)", "top_rung_alone_kendall_tau", None),
    ("Kendall tau: the answer from every rung of every config", "every_rung_answer_kendall_tau", None),
    ("Kendall tau: the lowest rung alone", "lowest_rung_alone_kendall_tau", None),
    ("noise ceiling (tau of a perfect predictor)", "tau_ceiling", None),
    ("regret (truth seed-noise units)", "regret_in_seed_noise", "regret_in_seed_noise"),
    ("true best in the predicted top 3", "true_best_in_predicted_top3", "true_best_in_predicted_top3"),
    ("hypervolume ratio (predicted front at true losses)", "hypervolume_ratio_nadir", "hypervolume_ratio_nadir"),
    ("compute / the truth's", "compute_share", "compute_share"),
    ("decisions right at matched cost", "decision_accuracy", "decision_accuracy"),
    ("decisions right: the top rung alone", "top_rung_alone_decision_accuracy", None),
    ("level at T: mean error (nats)", "level_error_mean", "level_error_mean"),
    ("level at T: mean absolute error (nats)", "level_error_mae", "level_error_mae"),
    ("80% band coverage of the truths", "band_coverage", "band_coverage"),
    ("80% bands about the corpus's level, config by config", "band_coverage_about_the_level", None),
    ("resolved calls right at matched cost", "resolved_call_accuracy", "resolved_call_accuracy"),
    ("share of the truth's resolvable pairs resolved right", "resolved_share_of_truth_resolvable",
     "resolved_share_of_truth_resolvable"),
)  # fmt: skip
_AT_MOST = ("regret_in_seed_noise", "compute_share", "level_error_mae")  # goals that are upper bounds


def _met(key: str, value: Any, goal: Any) -> bool | None:
    if goal is None or value is None:
        return None
    if isinstance(goal, list | tuple):  # a range
        return goal[0] <= value <= goal[1]
    if key == "true_best_in_predicted_top3":
        return bool(value)
    if key in _AT_MOST:
        return value <= goal
    return value >= goal


def _goal_text(key: str, goal: Any) -> str:
    if goal is None:
        return "baseline" if "alone" in key or "every_rung" in key else ""
    if isinstance(goal, list | tuple):
        return f"{goal[0]:g} to {goal[1]:g}"
    if isinstance(goal, bool):
        return "yes"
    return f"<= {goal:g}" if key in _AT_MOST else f">= {goal:g}"


def fidelity_benchmark_frame(summary: Mapping) -> pd.DataFrame:
    """The fidelity benchmark's headline figures (`benchmarks/trust/fidelity.py`) for each corpus, beside their goals:
    how far the answer a search gives at T agrees with the same configs trained there.

    Columns: figure, one value column per corpus (as text), goal, met (every corpus meets it; <NA> where the
    figure has no goal)."""
    goals, corpora = summary.get("goals", {}), summary["headline"]
    rows = []
    for label, key, goal_key in _FIDELITY_FIGURES:
        goal = goals.get(goal_key) if goal_key else None
        values = {name: figures.get(key) for name, figures in corpora.items()}
        met = [_met(key, v, goal) for v in values.values()]
        rows.append(
            {
                "figure": label,
                **{name: _figure_text(v) for name, v in values.items()},
                "goal": _goal_text(key, goal),
                "met": None if any(m is None for m in met) else all(met),
            }
        )
    return pd.DataFrame(rows).astype({"met": "boolean"})


def _figure_text(value: Any) -> str:
    """A benchmark figure as text: yes/no, 3 decimals, or '-' where the benchmark could not compute it."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return format_number(value, ".3f")


def target_frame(rows: Sequence, predictions: Mapping[int, Prediction], axis: CostAxis = COUNTED) -> pd.DataFrame:
    """One row per trial with a prediction: its measured (top-rung) loss, the predicted loss at the target and
    band, rungs, leave-one-out error and fit group, both costs per token, its measured / counted cost
    (`dashboard.cost.cost_ratios`), and whether it is on the front at T on `axis`; by number."""
    front = {r.number for r in front_at_target(rows, predictions, key=axis.of)}
    ratios = cost_ratios(rows)
    columns = (
        "number",
        "status",
        "residual",
        "rungs",
        "val_loss",
        "loss_at_T",
        "band_low",
        "band_high",
        "loo_error",
        "predicted_from",
        "executed_flops_per_token",
        "measured_s_per_token",
        "cost_ratio",
        "fit",
        "on_front_at_T",
    )
    records = [
        dict(
            number=r.number,
            status=str(r.status),
            residual=r.residual,
            rungs=p.rungs,
            val_loss=r.val_loss,
            loss_at_T=p.loss,
            band_low=p.low,
            band_high=p.high,
            loo_error=p.loo_error,
            predicted_from=f"{p.predictor}: {p.basis}",
            executed_flops_per_token=r.executed_flops_per_token,
            measured_s_per_token=seconds_per_token(r),
            cost_ratio=ratios.get(r.id),
            fit=group_label(p.group),
            on_front_at_T=r.number in front,
        )
        for r in sorted(rows, key=lambda r: r.number)
        if (p := predictions.get(r.number)) is not None
    ]
    return pd.DataFrame.from_records(records, columns=list(columns))
