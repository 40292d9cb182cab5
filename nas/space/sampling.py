"""Sampling a search space with Optuna, and turning sampled values into the trial's typed configs.

`suggest(space, trial)` is the define-by-run function for Optuna (and Ray Tune's OptunaSearch).
It samples EVERY knob on every trial, in the file's order, even one that the sampled
architecture ignores (`ancre_tau` unless residual is ancre, `mod_every` when mod_rate is 0):
GPSampler only models the intersection of the trials' spaces and TPE multivariate wants the
same parameters every time. `to_configs` turns the sampled values into the three typed configs;
combinations the configs reject (d_model not divisible by n_heads, odd head_dim) raise
`pydantic.ValidationError`, and `is_valid` gives that reason as one line so the search can record
the trial as infeasible. A candidates search samples `CANDIDATE` alone (each candidate is enqueued, so Optuna hands
them out in turn) and its configs are that candidate's (`nas.space.spec.candidate_values`).
"""

from __future__ import annotations

from typing import Any

import optuna
from pydantic import ValidationError

from search_spaces.residual_lm import ArchConfig, config_error_message
from workers.training.config import OptimConfig, RunConfig

from .messages import raise_errors
from .spec import CANDIDATE, CANDIDATE_KNOBS, FloatParam, IntParam, SearchSpace, build_configs, candidate_values

__all__ = ["is_valid", "suggest", "to_configs", "to_optuna_distributions"]


def suggest(space: SearchSpace, trial: optuna.Trial) -> dict[str, Any]:
    """Sample every knob of `space` on `trial`, always all of them, in the file's order; the flat dict.

    Knobs the sampled architecture ignores (ancre_tau unless residual is ancre, mod_every when
    mod_rate is 0) are sampled anyway: the space is then the same on every trial, which GPSampler
    requires and TPE multivariate exploits.
    """
    if space.candidates:
        return {CANDIDATE: trial.suggest_categorical(CANDIDATE, list(range(len(space.candidates))))}
    out: dict[str, Any] = {}
    for name, p in space.params.items():
        if isinstance(p, IntParam):
            out[name] = trial.suggest_int(name, p.low, p.high, step=p.step, log=p.log)
        elif isinstance(p, FloatParam):
            out[name] = trial.suggest_float(name, p.low, p.high, log=p.log)
        else:
            out[name] = trial.suggest_categorical(name, list(p.choices))
    return out


def to_optuna_distributions(space: SearchSpace) -> dict[str, optuna.distributions.BaseDistribution]:
    """The knobs the space varies as Optuna distributions (for `add_trial`, importances, knob effects); for a
    candidates search, each knob its candidates give more than one value of, over those values."""
    out: dict[str, optuna.distributions.BaseDistribution] = {}
    if space.candidates:
        configs = [to_configs(space, {CANDIDATE: i}) for i in range(len(space.candidates))]
        for name in CANDIDATE_KNOBS:
            owner = 0 if name in ArchConfig.model_fields else 1
            values = list(dict.fromkeys(getattr(c[owner], name) for c in configs))
            if len(values) > 1:
                out[name] = optuna.distributions.CategoricalDistribution(values)
        return out
    for name, p in space.params.items():
        if isinstance(p, IntParam):
            out[name] = optuna.distributions.IntDistribution(p.low, p.high, log=p.log, step=p.step)
        elif isinstance(p, FloatParam):
            out[name] = optuna.distributions.FloatDistribution(p.low, p.high, log=p.log)
        else:
            out[name] = optuna.distributions.CategoricalDistribution(list(p.choices))
    return out


def to_configs(space: SearchSpace, params: dict[str, Any]) -> tuple[ArchConfig, OptimConfig, RunConfig]:
    """Fixed values + sampled `params` -> (ArchConfig, OptimConfig, RunConfig).

    `params` must give exactly the sampled knobs (`SearchSpace.sampled`). Raises `pydantic.ValidationError` for
    missing or unknown knobs, or for values/combinations the configs reject (d_model not divisible by n_heads...).
    """
    errors = [
        ((name,), f"not a searched knob of this space (searched: {', '.join(space.sampled)})", value)
        for name, value in params.items()
        if name not in space.sampled
    ]
    errors += [((name,), "searched but missing", None) for name in space.sampled if name not in params]
    raise_errors(errors, "params")
    if space.candidates:
        return build_configs(candidate_values(space, int(params[CANDIDATE])))
    return build_configs({**space.fixed, **params})


def is_valid(space: SearchSpace, params: dict[str, Any]) -> str | None:
    """None if `params` build valid configs, else the one-line reason naming the field(s)."""
    try:
        to_configs(space, params)
    except ValidationError as err:
        return config_error_message(err)
    return None
