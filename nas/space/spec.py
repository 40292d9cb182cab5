"""The search-space spec: fixed and searched knobs, validated against the configs that own them.

A space file (the shipped default is `search_spaces/residual_lm/space.yaml`; see `loading.py`) reads

    family: residual_lm
    fixed:                      # ArchConfig / OptimConfig / RunConfig fields held constant
      seq_len: 128
    params:                     # one entry per searched knob, sampled in this order
      n_layers: {int: {low: 2, high: 8}}             # also step, log
      lr: {float: {low: 3.0e-4, high: 1.0e-2, log: true}}
      residual: {categorical: [cascaded, nag, ancre]}

Every knob name must be a field of `ArchConfig`, `OptimConfig` or `RunConfig`, and every bound,
choice and fixed value must be one that field accepts; at least one combination must be a valid
architecture (`cheapest_of`, answered by the family itself). `nas.space.loading.space_error_message` turns any
problem into ONE line naming the field path (`params.ancre_tau.low: must be > 0 for a log scale
(got 0.0)`).

A candidates search (`nas search --candidates`, `nas.space.candidates`) searches no ranges: its space lists
`candidates`, each some of the `CANDIDATE_KNOBS`, and samples one knob, `CANDIDATE`: which candidate a trial trains
(Optuna is handed each one, enqueued). A candidate's knobs over the fields every trial shares (`fixed`, less the
candidate knobs: a knob a candidate leaves out takes its config's default, never the space's) make its configs
(`candidate_values`).
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from search_spaces.residual_lm import ArchConfig, cheapest_config, flops_per_token
from search_spaces.residual_lm.cheapest import NoValidConfig
from workers.training.config import OptimConfig, RunConfig

from .messages import pretty_message, raise_errors

__all__ = [
    "CANDIDATE",
    "CANDIDATE_KNOBS",
    "CONFIG_MODELS",
    "KNOWN_FIELDS",
    "SCHEDULE_FIELDS",
    "CategoricalParam",
    "FloatParam",
    "IntParam",
    "Param",
    "SearchSpace",
    "SpaceError",
    "build_configs",
    "candidate_values",
    "check_knob",
    "describe",
    "shared_fields",
    "cheapest_of",
]

#: The three typed configs a trial is built from, by the short name used in messages.
CONFIG_MODELS: dict[str, type[BaseModel]] = {"arch": ArchConfig, "optim": OptimConfig, "run": RunConfig}


def _known_fields() -> dict[str, str]:
    """Every knob a space may fix or search -> the config that owns it ("arch", "optim" or "run")."""
    known: dict[str, str] = {}
    for owner, model in CONFIG_MODELS.items():
        for name in model.model_fields:
            if name in known:  # a name in two configs could not be routed
                raise RuntimeError(f"config field {name!r} is in both {known[name]} and {owner}")
            known[name] = owner
    return known


KNOWN_FIELDS: dict[str, str] = _known_fields()
#: The target run's learning-rate schedule: one for the whole search, so a space may fix it, never search it.
SCHEDULE_FIELDS = ("schedule", "cooldown")
#: The knobs a candidate of a candidates search may give: the architecture and the optimiser's own.
CANDIDATE_KNOBS = (
    "residual",
    "n_layers",
    "d_model",
    "n_heads",
    "mlp_ratio",
    "ancre_tau",
    "mod_rate",
    "mod_every",
    "mod_granularity",
    "lr",
    "warmup",
    "weight_decay",
)
CANDIDATE = "candidate"  # what a candidates search samples: the index of the candidate a trial trains

_KINDS = ("int", "float", "categorical")
_ENTRY_FORMS = "{int: {low, high, step?, log?}}, {float: {low, high, log?}} or {categorical: [choices]}"


class SpaceError(ValueError):
    """A search-space file that cannot be used; the message is one line naming file and field."""


# ---------------------------------------------------------------------------------------------
# The spec models


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class IntParam(_Frozen):
    """`{int: {low, high, step?, log?}}`: integers low..high inclusive, every `step`, optionally log-uniform."""

    kind: Literal["int"] = "int"
    low: int = Field(strict=True)
    high: int = Field(strict=True)
    step: int = Field(1, ge=1, strict=True)
    log: bool = False

    @model_validator(mode="after")
    def _check(self) -> IntParam:
        errors = []
        if self.low >= self.high:
            errors.append((("high",), f"must be > low (got low={self.low}, high={self.high})", self.high))
        elif (self.high - self.low) % self.step:
            errors.append(
                (
                    ("high",),
                    f"high - low must be a multiple of step={self.step} (got low={self.low}, high={self.high})",
                    self.high,
                )
            )
        if self.log and self.low <= 0:
            errors.append((("low",), f"must be > 0 for a log scale (got {self.low})", self.low))
        if self.log and self.step != 1:
            errors.append((("step",), f"must be 1 for a log scale (got {self.step})", self.step))
        raise_errors(errors, "IntParam")
        return self

    def values(self) -> list[int]:
        return list(range(self.low, self.high + 1, self.step))


class FloatParam(_Frozen):
    """`{float: {low, high, log?}}`: uniform (or log-uniform) reals in [low, high]."""

    kind: Literal["float"] = "float"
    low: float = Field(allow_inf_nan=False)
    high: float = Field(allow_inf_nan=False)
    log: bool = False

    @model_validator(mode="after")
    def _check(self) -> FloatParam:
        errors = []
        if self.low >= self.high:
            errors.append((("high",), f"must be > low (got low={self.low}, high={self.high})", self.high))
        if self.log and self.low <= 0:
            errors.append((("low",), f"must be > 0 for a log scale (got {self.low})", self.low))
        raise_errors(errors, "FloatParam")
        return self


Choice = None | bool | int | float | str  # what Optuna's CategoricalDistribution accepts


class CategoricalParam(_Frozen):
    """`{categorical: [choices]}`: one of a non-empty list of distinct values."""

    kind: Literal["categorical"] = "categorical"
    choices: tuple[Choice, ...] = Field(min_length=1)

    @field_validator("choices")
    @classmethod
    def _distinct(cls, choices: tuple) -> tuple:
        seen: list = []
        for c in choices:
            if any(c == s for s in seen):  # also 1 == 1.0 == True: Optuna could not tell them apart
                raise ValueError(f"choices must be distinct (got {list(choices)!r})")
            seen.append(c)
        return choices


Param = Annotated[IntParam | FloatParam | CategoricalParam, Field(discriminator="kind")]


def _field_info(name: str):
    return CONFIG_MODELS[KNOWN_FIELDS[name]].model_fields[name]


@functools.cache
def _field_adapter(name: str) -> TypeAdapter:
    """Validates one value exactly as the owning config's field would (type and range)."""
    info = _field_info(name)
    annotated: tuple[Any, ...] = (info.annotation, *info.metadata)
    annotation: Any = Annotated[annotated] if info.metadata else info.annotation
    return TypeAdapter(annotation)


def _unknown(name: str, where: str) -> tuple[tuple[Any, ...], str, Any]:
    known = "; ".join(
        f"{owner} ({model.__name__}): {', '.join(model.model_fields)}" for owner, model in CONFIG_MODELS.items()
    )
    return (name,), f"unknown {where} {name!r}; known fields are {known}", name


def _check_value(name: str, value: Any, loc: tuple, errors: list) -> Any:
    """The value coerced by the field's own type, or record why the field rejects it."""
    try:
        return _field_adapter(name).validate_python(value)
    except ValidationError as err:
        errors.append((loc, f"{name}: {pretty_message(err.errors()[0])}", value))
        return value


def check_knob(name: str, value: Any) -> Any:
    """`value` coerced by the type of the field `name`; ValueError with the field's one-line reason otherwise."""
    try:
        return _field_adapter(name).validate_python(value)
    except ValidationError as err:
        raise ValueError(pretty_message(err.errors()[0])) from None


def build_configs(values: dict[str, Any]) -> tuple[ArchConfig, OptimConfig, RunConfig]:
    """Field values -> (ArchConfig, OptimConfig, RunConfig), each value to the config that owns it; a field left out
    takes its config's default. Raises pydantic's ValidationError for a value or a combination the configs reject."""
    by_owner: dict[str, dict] = {owner: {} for owner in CONFIG_MODELS}
    for name, value in values.items():
        by_owner[KNOWN_FIELDS[name]][name] = value
    return ArchConfig(**by_owner["arch"]), OptimConfig(**by_owner["optim"]), RunConfig(**by_owner["run"])


class SearchSpace(_Frozen):
    """A validated search space: the family, knobs held fixed, and knobs searched (in sampling order); or, for a
    candidates search, the `candidates` instead of searched knobs (module docstring)."""

    family: Literal["residual_lm"] = "residual_lm"
    fixed: dict[str, Any] = Field(default_factory=dict)
    params: dict[str, Param] = Field(default_factory=dict)
    candidates: tuple[dict[str, Any], ...] = ()

    @property
    def sampled(self) -> tuple[str, ...]:
        """The names Optuna samples for a trial: the searched knobs, or `CANDIDATE`."""
        return (CANDIDATE,) if self.candidates else tuple(self.params)

    @field_validator("fixed", mode="before")
    @classmethod
    def _empty_fixed(cls, fixed: Any) -> Any:
        return {} if fixed is None else fixed  # `fixed:` with every line commented out

    @field_validator("fixed")
    @classmethod
    def _check_fixed(cls, fixed: dict) -> dict:
        errors: list = []
        out = {}
        for name, value in fixed.items():
            if name not in KNOWN_FIELDS:
                errors.append(_unknown(name, "fixed field"))
                continue
            out[name] = _check_value(name, value, (name,), errors)
        raise_errors(errors)
        return out

    @field_validator("params", mode="before")
    @classmethod
    def _unwrap_entries(cls, params: Any) -> Any:
        """YAML form `{int: {...}}` / `{categorical: [...]}` -> the models' `{kind: ..., ...}` form."""
        if not isinstance(params, dict):
            return params  # pydantic reports the type error
        errors: list[tuple[tuple[Any, ...], str, Any]] = []
        out: dict[str, Any] = {}
        for name, entry in params.items():
            if isinstance(entry, BaseModel) or (isinstance(entry, dict) and "kind" in entry):
                out[name] = entry
            elif isinstance(entry, dict) and len(entry) == 1 and next(iter(entry)) in _KINDS:
                kind, body = next(iter(entry.items()))
                if kind == "categorical":
                    out[name] = {"kind": kind, "choices": body}
                elif isinstance(body, dict):
                    out[name] = {"kind": kind, **body}
                else:
                    errors.append(
                        ((name, kind), f"must be a mapping like {{low: ..., high: ...}} (got {body!r})", body)
                    )
            else:
                errors.append(((name,), f"must be one of {_ENTRY_FORMS} (got {entry!r})", entry))
        raise_errors(errors)
        return out

    @field_validator("params")
    @classmethod
    def _check_params(cls, params: dict) -> dict:
        """Known names, bounds and choices the owning field accepts, integer knobs sampled as integers."""
        errors: list = []
        out = {}
        for name, p in params.items():
            if name not in KNOWN_FIELDS:
                errors.append(_unknown(name, "searched field"))
                continue
            if isinstance(p, CategoricalParam):
                choices = tuple(
                    _check_value(name, c, (name, "categorical", "choices", i), errors) for i, c in enumerate(p.choices)
                )
                try:
                    p = CategoricalParam(choices=choices)
                except ValidationError as err:
                    errors.append(((name, "categorical", "choices"), pretty_message(err.errors()[0]), choices))
            else:
                if isinstance(p, FloatParam) and _field_info(name).annotation is int:
                    errors.append(
                        (
                            (name,),
                            f"{name} is a whole number: use {{int: {{low, high}}}} or {{categorical: [...]}}",
                            None,
                        )
                    )
                    continue
                for bound in ("low", "high"):
                    _check_value(name, getattr(p, bound), (name, p.kind, bound), errors)
            out[name] = p
        raise_errors(errors)
        return out

    @model_validator(mode="after")
    def _check_space(self) -> SearchSpace:
        if self.candidates:
            self._check_candidates()
            return self
        if not self.params:
            raise_errors([(("params",), "must search at least one knob (or list candidates)", None)])
        errors = [
            (("params", name), f"{name} is also in fixed: a knob is either fixed or searched", None)
            for name in self.params
            if name in self.fixed
        ]
        errors += [
            (
                ("params", name),
                f"{name} is the target run's learning-rate schedule, one for the whole search: fix it "
                "(or give nas search --schedule / --cooldown), do not search it",
                None,
            )
            for name in SCHEDULE_FIELDS
            if name in self.params
        ]
        raise_errors(errors)
        try:
            _cheapest(self)
        except NoValidConfig as reason:  # no combination of the knobs is a valid ArchConfig
            raise_errors([(("params",), f"no valid architecture in the space (e.g. {reason})", None)])
        return self

    def _check_candidates(self) -> None:
        errors: list = [(("params",), "a candidates search searches no ranges: give params or candidates", None)]
        errors = errors if self.params else []
        for index, knobs in enumerate(self.candidates):
            errors += [
                (("candidates", index, name), f"not a candidate's knob ({', '.join(CANDIDATE_KNOBS)})", None)
                for name in knobs
                if name not in CANDIDATE_KNOBS
            ]
            try:
                build_configs(candidate_values(self, index))
            except ValidationError as err:
                errors.append((("candidates", index), pretty_message(err.errors()[0]), knobs))
        raise_errors(errors)

    def schedule_fields(self) -> dict[str, Any]:
        """The learning-rate schedule every run of the search follows: the fixed `schedule` and `cooldown`,
        else OptimConfig's defaults."""
        return {name: self.fixed.get(name, OptimConfig.model_fields[name].default) for name in SCHEDULE_FIELDS}

    def spec(self) -> dict:
        """The YAML form of this space (plain types); `SearchSpace.model_validate(spec)` rebuilds it."""
        params: dict[str, dict[str, Any]] = {}
        for name, p in self.params.items():
            if isinstance(p, CategoricalParam):
                params[name] = {"categorical": list(p.choices)}
            else:
                params[name] = {p.kind: p.model_dump(exclude={"kind"}, exclude_defaults=True)}
        spec = {"family": self.family, "fixed": dict(self.fixed), "params": params}
        return spec | ({"candidates": [dict(c) for c in self.candidates]} if self.candidates else {})


def shared_fields(space: SearchSpace) -> dict[str, Any]:
    """The fixed fields every candidate of a candidates search shares: `fixed`, less the candidate knobs."""
    return {k: v for k, v in space.fixed.items() if k not in CANDIDATE_KNOBS}


def candidate_values(space: SearchSpace, index: int) -> dict[str, Any]:
    """Candidate `index`'s field values: its knobs over the fields every trial shares (a knob it leaves out takes
    its config's default)."""
    return {**shared_fields(space), **space.candidates[index]}


# ---------------------------------------------------------------------------------------------
# The cheapest architecture of a space (the family knows how its FLOPs grow with each knob)


def _candidates(p: IntParam | FloatParam | CategoricalParam) -> list:
    """What a knob can take: every value of a discrete knob, the two ends of a continuous one."""
    if isinstance(p, IntParam):
        return p.values()
    if isinstance(p, FloatParam):
        return [p.low, p.high]
    return list(p.choices)


def _cheapest(space: SearchSpace) -> ArchConfig:
    if space.candidates:
        archs = [build_configs(candidate_values(space, i))[0] for i in range(len(space.candidates))]
        return min(archs, key=lambda arch: flops_per_token(arch).executed)
    fixed = {k: v for k, v in space.fixed.items() if KNOWN_FIELDS[k] == "arch"}
    candidates = {k: _candidates(p) for k, p in space.params.items() if KNOWN_FIELDS[k] == "arch"}
    return cheapest_config(fixed, candidates)


def cheapest_of(space: SearchSpace) -> ArchConfig:
    """The valid architecture of `space` with the fewest expected executed forward FLOPs per token
    (`search_spaces.residual_lm.cheapest_config`). Raises SpaceError if there is none (a validated
    SearchSpace always has one)."""
    try:
        return _cheapest(space)
    except NoValidConfig as reason:
        raise SpaceError(f"params: no valid architecture in the space (e.g. {reason})") from None


def describe(cfg: ArchConfig) -> str:
    """A short one-line description of the knobs that matter for cost."""
    text = (
        f"n_layers={cfg.n_layers} d_model={cfg.d_model} n_heads={cfg.n_heads} "
        f"mlp_ratio={cfg.mlp_ratio:g} residual={cfg.residual}"
    )
    if cfg.mod_rate:
        text += f" mod_rate={cfg.mod_rate:g} mod_every={cfg.mod_every}"
    return text + f" seq_len={cfg.seq_len} vocab_size={cfg.vocab_size}"
