"""A search's knob effects (`nas.answer.effects`) read from its trials: the completed trials as observations, the
effects at the answer's target beside Optuna's importances.

Importance comes from Optuna's own evaluators (`optuna.importance.get_param_importances`) on an in-memory study of
the trials' sampled values with their predicted losses at T as values (PED-ANOVA, Optuna 5's default evaluator).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace

from .effects import Effects, Observation, estimate_effects, knobs_of
from .error_model import BAND_Z

__all__ = ["observations", "param_importances", "search_effects"]


def param_importances(rows: Sequence[Observation], distributions: Mapping[str, object]) -> tuple[dict[str, float], str]:
    """(each knob's importance to the loss at T, the evaluator's name), from Optuna's default evaluator on an
    in-memory study of the trials (values: the predicted losses at T). Empty when Optuna cannot evaluate it."""
    import optuna
    from optuna.importance import get_param_importances

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize")
    trials = []
    for o in rows:
        params = {k: o.knobs[k] for k in distributions if k in o.knobs}
        if not math.isfinite(o.loss) or len(params) < len(distributions):
            continue
        try:
            trials.append(optuna.trial.create_trial(params=params, distributions=dict(distributions), value=o.loss))
        except ValueError:
            continue
    study.add_trials(trials)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return dict(get_param_importances(study)), "PED-ANOVA (Optuna's default)"
    except (ValueError, RuntimeError, ZeroDivisionError):
        return {}, "PED-ANOVA (Optuna's default): not enough trials"


def search_effects(rows: Sequence, answer, distributions: Mapping[str, object], at_equal: str = "flops") -> Effects:
    """The Effects of a search's completed trial `rows` at its `answer`'s target, over the space's searched
    knobs (`distributions`, Optuna's), with Optuna's importances beside them."""
    from .decisions import trial_facts

    completed = [r for r in rows if str(r.status) == "completed" and r.executed_flops_per_token]
    flops = {r.number: float(r.executed_flops_per_token) for r in completed}
    params = trial_facts(completed)[2] if at_equal == "params" else {}  # counting builds each model: only if asked
    found = observations(completed, answer, flops, params, list(distributions))
    effects = estimate_effects(found, knobs_of(distributions), at_equal, answer.target, answer.noise)
    importances, evaluator = param_importances(found, distributions)
    out = [replace(e, importance=importances.get(e.knob)) for e in effects.effects]
    return replace(effects, effects=out, evaluator=evaluator)


def observations(
    rows: Sequence, answer, flops: Mapping[int, float], params: Mapping[int, float], searched: Sequence[str]
) -> list[Observation]:
    """The completed trial rows with a finite prediction in `answer` as Observations: their `searched` knob
    values (from the row's config), the prediction and its own sd (`Prediction.relative_sd`, the error model's part
    that differs between trials; else half its 80% band / BAND_Z, else the seed noise at T), their executed FLOPs per
    token and parameters (`nas.answer.decisions.trial_facts`; None where absent)."""
    out = []
    for r in rows:
        p = answer.predictions.get(r.number)
        if p is None or not math.isfinite(p.loss) or r.number not in flops:
            continue
        knobs = (r.config or {}).get("arch") or r.config or {}
        values = {k: v for k, v in {**(r.config or {}), **knobs}.items() if k in searched}
        sd = p.relative_sd
        if sd is None and p.low is not None and p.high is not None:
            sd = (p.high - p.low) / 2.0 / BAND_Z
        sd = sd if sd is not None else answer.noise_at_target(r.number)
        out.append(Observation(values, p.loss, sd, flops[r.number], params.get(r.number)))
    return out
