"""Search spaces: a YAML spec of fixed and searched knobs, its validation, and sampling with Optuna.

A space file (the shipped default is `search_spaces/residual_lm/space.yaml`) reads

    family: residual_lm
    fixed:                      # ArchConfig / OptimConfig / RunConfig fields held constant
      seq_len: 128
    params:                     # one entry per searched knob, sampled in this order
      n_layers: {int: {low: 2, high: 8}}             # also step, log
      lr: {float: {low: 3.0e-4, high: 1.0e-2, log: true}}
      residual: {categorical: [cascaded, nag, ancre]}

Every knob name must be a field of `ArchConfig`, `OptimConfig` or `RunConfig`, and every bound,
choice and fixed value must be one that field accepts. `load_space` turns any problem into ONE
line naming the file and the field path (`space.yaml: params.ancre_tau.low: must be > 0 for a
log scale (got 0.0)`), raised as `SpaceError`.

`suggest(space, trial)` is the define-by-run function for Optuna (and Ray Tune's OptunaSearch).
It samples EVERY knob on every trial, in the file's order, even one that the sampled
architecture ignores (`ancre_tau` unless residual is ancre, `mod_every` when mod_rate is 0):
GPSampler only models the intersection of the trials' spaces (DESIGN.md §5) and TPE
multivariate wants the same parameters every time. `to_configs` turns the sampled values into
the three typed configs; combinations the configs reject (d_model not divisible by n_heads, odd
head_dim) raise `pydantic.ValidationError`, and `is_valid` gives that reason as one line so the
search can record the trial as infeasible.
"""

from __future__ import annotations

import functools
import itertools
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import optuna
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from search_spaces.residual_lm import ArchConfig, config_error_message, flops_per_token
from workers.train import OptimConfig, RunConfig

__all__ = [
    "CONFIG_MODELS",
    "KNOWN_FIELDS",
    "CategoricalParam",
    "FloatParam",
    "IntParam",
    "SearchSpace",
    "SpaceError",
    "default_space_path",
    "describe",
    "is_valid",
    "load_space",
    "smallest_config",
    "space_error_message",
    "space_from_dict",
    "suggest",
    "to_configs",
    "to_optuna_distributions",
]

#: The three typed configs a trial is built from, by the short name used in messages.
CONFIG_MODELS: dict[str, type[BaseModel]] = {"arch": ArchConfig, "optim": OptimConfig, "run": RunConfig}

#: Every knob a space may fix or search -> the config that owns it ("arch", "optim" or "run").
KNOWN_FIELDS: dict[str, str] = {}
for _owner, _model in CONFIG_MODELS.items():
    for _name in _model.model_fields:
        if _name in KNOWN_FIELDS:  # a name in two configs could not be routed
            raise RuntimeError(f"config field {_name!r} is in both {KNOWN_FIELDS[_name]} and {_owner}")
        KNOWN_FIELDS[_name] = _owner

# A YAML 1.1 quirk: PyYAML reads `1e-3` (no dot) as a string.
_YAML_FLOAT_HINT = " (YAML reads 1e-3 as text: write 1.0e-3)"
_KINDS = ("int", "float", "categorical")
_ENTRY_FORMS = "{int: {low, high, step?, log?}}, {float: {low, high, log?}} or {categorical: [choices]}"


class SpaceError(ValueError):
    """A search-space file that cannot be used; the message is one line naming file and field."""


# ---------------------------------------------------------------------------------------------
# Errors located at a field path (raised inside validators, nested by pydantic)


def _fail(errors: list[tuple[tuple, str, Any]], title: str = "SearchSpace") -> None:
    """Raise one ValidationError carrying each (loc, message, input); pydantic prefixes outer locs."""
    if errors:
        raise ValidationError.from_exception_data(
            title,
            [InitErrorDetails(type=PydanticCustomError("space", msg), loc=loc, input=value)
             for loc, msg, value in errors],
        )


_PRETTY = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "finite_number": "must be a finite number",
    "missing": "required",
    "extra_forbidden": "unknown key",
    "int_from_float": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "too_short": "must not be empty",
    "dict_type": "must be a mapping",
}


def pretty_message(error: dict) -> str:
    """One pydantic error entry as `must be > 0 (got -1.0)`: short wording, the offending input."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "space":  # our own messages already say what they got
        return error["msg"]
    ctx = {k: f"{v:g}" if isinstance(v, float) else v for k, v in ctx.items()}
    msg = _PRETTY[kind].format(**ctx) if kind in _PRETTY else error["msg"].removeprefix("Value error, ")
    value = error.get("input")
    if kind in ("missing", "extra_forbidden") or isinstance(value, (dict, list, tuple)):
        return msg
    hint = _YAML_FLOAT_HINT if isinstance(value, str) and _looks_numeric(value) else ""
    return f"{msg} (got {value!r}){hint}"


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _path(loc: tuple) -> str:
    """`('params', 'ancre_tau', 'float', 'low')` -> `params.ancre_tau.low`; list indices as [i].

    The tag pydantic adds for the knob's kind is dropped for int/float (the brief's path form);
    for a categorical the list IS the `categorical:` entry, so `choices` becomes `categorical`.
    """
    parts = list(loc)
    if len(parts) >= 3 and parts[0] == "params" and parts[2] in _KINDS:
        if parts[2] == "categorical" and len(parts) >= 4 and parts[3] == "choices":
            del parts[3]
        else:
            del parts[2]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "space"


def _accepted_keys(loc: tuple) -> str:
    """For an unknown key: the keys accepted at that place of the spec."""
    if len(loc) == 1:
        return ", ".join(SearchSpace.model_fields)
    if len(loc) == 4 and loc[0] == "params" and loc[2] in ("int", "float"):
        model = IntParam if loc[2] == "int" else FloatParam
        return ", ".join(k for k in model.model_fields if k != "kind")
    return ""


def space_error_message(err: ValidationError, source: str | None = None) -> str:
    """One line: `source: path: message; path: message`."""
    parts = []
    for e in err.errors():
        msg = pretty_message(e)
        if e["type"] == "extra_forbidden" and (accepted := _accepted_keys(e["loc"])):
            msg += f"; accepted: {accepted}"
        parts.append(f"{_path(e['loc'])}: {msg}")
    body = "; ".join(parts)
    return f"{source}: {body}" if source else body


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
    def _check(self) -> "IntParam":
        errors = []
        if self.low >= self.high:
            errors.append((("high",), f"must be > low (got low={self.low}, high={self.high})", self.high))
        elif (self.high - self.low) % self.step:
            errors.append((("high",), f"high - low must be a multiple of step={self.step} "
                                      f"(got low={self.low}, high={self.high})", self.high))
        if self.log and self.low <= 0:
            errors.append((("low",), f"must be > 0 for a log scale (got {self.low})", self.low))
        if self.log and self.step != 1:
            errors.append((("step",), f"must be 1 for a log scale (got {self.step})", self.step))
        _fail(errors, "IntParam")
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
    def _check(self) -> "FloatParam":
        errors = []
        if self.low >= self.high:
            errors.append((("high",), f"must be > low (got low={self.low}, high={self.high})", self.high))
        if self.log and self.low <= 0:
            errors.append((("low",), f"must be > 0 for a log scale (got {self.low})", self.low))
        _fail(errors, "FloatParam")
        return self


Choice = Union[None, bool, int, float, str]  # what Optuna's CategoricalDistribution accepts


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


Param = Annotated[Union[IntParam, FloatParam, CategoricalParam], Field(discriminator="kind")]


def _field_info(name: str):
    return CONFIG_MODELS[KNOWN_FIELDS[name]].model_fields[name]


@functools.cache
def _field_adapter(name: str) -> TypeAdapter:
    """Validates one value exactly as the owning config's field would (type and range)."""
    info = _field_info(name)
    return TypeAdapter(Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation)


def _unknown(name: str, where: str) -> tuple[tuple, str, Any]:
    known = "; ".join(f"{owner} ({model.__name__}): {', '.join(model.model_fields)}"
                      for owner, model in CONFIG_MODELS.items())
    return (name,), f"unknown {where} {name!r}; known fields are {known}", name


def _check_value(name: str, value: Any, loc: tuple, errors: list) -> Any:
    """The value coerced by the field's own type, or record why the field rejects it."""
    try:
        return _field_adapter(name).validate_python(value)
    except ValidationError as err:
        errors.append((loc, f"{name}: {pretty_message(err.errors()[0])}", value))
        return value


class SearchSpace(_Frozen):
    """A validated search space: the family, knobs held fixed, and knobs searched (in sampling order)."""

    family: Literal["residual_lm"] = "residual_lm"
    fixed: dict[str, Any] = Field(default_factory=dict)
    params: dict[str, Param]

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
        _fail(errors)
        return out

    @field_validator("params", mode="before")
    @classmethod
    def _unwrap_entries(cls, params: Any) -> Any:
        """YAML form `{int: {...}}` / `{categorical: [...]}` -> the models' `{kind: ..., ...}` form."""
        if not isinstance(params, dict):
            return params  # pydantic reports the type error
        errors, out = [], {}
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
                    errors.append(((name, kind), f"must be a mapping like {{low: ..., high: ...}} (got {body!r})", body))
            else:
                errors.append(((name,), f"must be one of {_ENTRY_FORMS} (got {entry!r})", entry))
        _fail(errors)
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
                choices = tuple(_check_value(name, c, (name, "categorical", "choices", i), errors)
                                for i, c in enumerate(p.choices))
                try:
                    p = CategoricalParam(choices=choices)
                except ValidationError as err:
                    errors.append(((name, "categorical", "choices"), pretty_message(err.errors()[0]), choices))
            else:
                if isinstance(p, FloatParam) and _field_info(name).annotation is int:
                    errors.append(((name,), f"{name} is a whole number: use {{int: {{low, high}}}} "
                                            f"or {{categorical: [...]}}", None))
                    continue
                for bound in ("low", "high"):
                    _check_value(name, getattr(p, bound), (name, p.kind, bound), errors)
            out[name] = p
        _fail(errors)
        return out

    @model_validator(mode="after")
    def _check_space(self) -> "SearchSpace":
        errors = [(("params", name), f"{name} is also in fixed: a knob is either fixed or searched", None)
                  for name in self.params if name in self.fixed]
        _fail(errors)
        smallest, reason = _smallest(self)
        if smallest is None:  # no combination of the knobs is a valid ArchConfig
            _fail([(("params",), f"no valid architecture in the space (e.g. {reason})", None)])
        return self

    def spec(self) -> dict:
        """The YAML form of this space (plain types); `SearchSpace.model_validate(spec)` rebuilds it."""
        params = {}
        for name, p in self.params.items():
            if isinstance(p, CategoricalParam):
                params[name] = {"categorical": list(p.choices)}
            else:
                params[name] = {p.kind: p.model_dump(exclude={"kind"}, exclude_defaults=True)}
        return {"family": self.family, "fixed": dict(self.fixed), "params": params}


# ---------------------------------------------------------------------------------------------
# Loading


def default_space_path() -> Path:
    """The shipped default space, located inside the `search_spaces.residual_lm` package."""
    return Path(str(resources.files("search_spaces.residual_lm").joinpath("space.yaml")))


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (safe_load keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_space(path: str | Path | None = None) -> SearchSpace:
    """Read and validate a space file (None = the shipped default). Raises SpaceError (one line)."""
    file = Path(path) if path is not None else default_space_path()
    source = str(path) if path is not None else "search_spaces/residual_lm/space.yaml"
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpaceError(f"{source}: no such file") from None
    except OSError as err:
        raise SpaceError(f"{source}: cannot read ({err.strerror or err})") from None
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: plain YAML types only
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(err, "problem", None) or str(err)
        context = getattr(err, "context", None)
        detail = f"{context}: {problem}" if context else problem
        raise SpaceError(f"{where}: invalid YAML: {' '.join(str(detail).split())}") from None
    if not isinstance(raw, dict):
        raise SpaceError(f"{source}: must be a mapping with keys family, fixed, params "
                         f"(got {type(raw).__name__})")
    return space_from_dict(raw, source)


def space_from_dict(raw: dict, source: str = "space") -> SearchSpace:
    """Validate an already-parsed spec; raises SpaceError naming `source` and the field path."""
    try:
        return SearchSpace.model_validate(raw)
    except ValidationError as err:  # the validators' own errors arrive wrapped in it too
        raise SpaceError(space_error_message(err, source)) from None


# ---------------------------------------------------------------------------------------------
# Sampling


def suggest(space: SearchSpace, trial: optuna.Trial) -> dict[str, Any]:
    """Sample every knob of `space` on `trial`, always all of them, in the file's order; the flat dict.

    Knobs the sampled architecture ignores (ancre_tau unless residual is ancre, mod_every when
    mod_rate is 0) are sampled anyway: the space is then the same on every trial, which GPSampler
    requires and TPE multivariate exploits.
    """
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
    """The same space as Optuna distributions (for `study.ask(fixed_distributions)`, `add_trial`, ...)."""
    out: dict[str, optuna.distributions.BaseDistribution] = {}
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

    `params` must give exactly the searched knobs. Raises `pydantic.ValidationError` for missing or
    unknown knobs, or for values/combinations the configs reject (d_model not divisible by n_heads...).
    """
    errors = [((name,), f"not a searched knob of this space (searched: {', '.join(space.params)})", value)
              for name, value in params.items() if name not in space.params]
    errors += [((name,), "searched but missing", None)
               for name in space.params if name not in params]
    _fail(errors, "params")
    values = {**space.fixed, **params}
    by_owner: dict[str, dict] = {owner: {} for owner in CONFIG_MODELS}
    for name, value in values.items():
        by_owner[KNOWN_FIELDS[name]][name] = value
    return (ArchConfig(**by_owner["arch"]), OptimConfig(**by_owner["optim"]), RunConfig(**by_owner["run"]))


def is_valid(space: SearchSpace, params: dict[str, Any]) -> str | None:
    """None if `params` build valid configs, else the one-line reason naming the field(s)."""
    try:
        to_configs(space, params)
    except ValidationError as err:
        return config_error_message(err)
    return None


# ---------------------------------------------------------------------------------------------
# The cheapest architecture of a space

# Executed forward FLOPs per token (search_spaces/residual_lm/flops.py) are non-decreasing in each
# of these knobs whatever the others are: more layers add terms, and d, mlp_ratio (through
# mlp_hidden), seq_len (attended keys), vocab_size (unembedding) and the NAG gate size C only
# grow existing terms. So the cheapest config takes each one's smallest value.
_MONOTONE = ("n_layers", "d_model", "mlp_ratio", "seq_len", "vocab_size", "nag_gate_components")
# These do not enter the FLOP count at all (full-head attention costs 8 d^2 whatever n_heads is);
# n_heads is chosen only so that the config is valid.
_FLOP_FREE = ("n_heads", "ancre_tau", "tie_embeddings")


def _ascending(p: IntParam | FloatParam | CategoricalParam) -> list:
    if isinstance(p, IntParam):
        return p.values()
    if isinstance(p, FloatParam):
        return [p.low]
    return sorted(p.choices)


def _extremes(p: IntParam | FloatParam | CategoricalParam) -> list:
    if isinstance(p, CategoricalParam):
        return list(p.choices)
    return [p.low] if p.low == p.high else [p.low, p.high]


def smallest_config(space: SearchSpace) -> ArchConfig:
    """The valid architecture of `space` with the fewest expected executed forward FLOPs per token.

    How it is chosen (exact for the knobs ArchConfig has today, without walking the whole grid):
    - monotone knobs (n_layers, d_model, mlp_ratio, seq_len, vocab_size, nag_gate_components)
      take their smallest value: FLOPs never decrease when one of them grows;
    - FLOP-free knobs (n_heads, ancre_tau, tie_embeddings) take the first value that makes the
      config valid; validity couples d_model and n_heads (divisible, even head_dim), so d_model
      is scanned upwards until some n_heads in the space is valid with it;
    - every other knob (residual, mod_rate, mod_every, mod_routing) is enumerated: all choices of
      a categorical, both ends of a numeric range, and the cheapest combination wins (first one on
      ties). Ends suffice: for mod_rate > 0 the executed FLOPs fall as the rate rises, with a
      router cost that appears only above 0, so the minimum is at 0 or at the top; mod_every only
      sets how many blocks are routed, which falls as it grows, and every routed block saves the
      same amount, so the minimum is at one end. residual: cascaded <= ancre (mixing terms), and
      nag pays its gate (2Cd per sublayer) instead of the router (2d), so the enumeration decides.
    Raises SpaceError if no combination is a valid ArchConfig (a validated SearchSpace has one).
    """
    cfg, reason = _smallest(space)
    if cfg is None:
        raise SpaceError(f"params: no valid architecture in the space (e.g. {reason})")
    return cfg


def _smallest(space: SearchSpace) -> tuple[ArchConfig | None, str]:
    """smallest_config's search: (the config or None, the last reason a candidate was invalid)."""
    arch_fixed = {k: v for k, v in space.fixed.items() if KNOWN_FIELDS[k] == "arch"}
    arch_params = {k: p for k, p in space.params.items() if KNOWN_FIELDS[k] == "arch"}
    chosen = {k: _ascending(p)[0] for k, p in arch_params.items() if k in _MONOTONE and k != "d_model"}
    chosen |= {k: _ascending(p)[0] for k, p in arch_params.items()
               if k in _FLOP_FREE and k != "n_heads"}
    widths = _ascending(arch_params["d_model"]) if "d_model" in arch_params else [None]
    heads = _ascending(arch_params["n_heads"]) if "n_heads" in arch_params else [None]
    enumerated = {k: _extremes(p) for k, p in arch_params.items()
                  if k not in _MONOTONE and k not in _FLOP_FREE}
    names = list(enumerated)
    best: tuple[float, ArchConfig] | None = None
    last_error = "no candidate"
    for combo in itertools.product(*(enumerated[k] for k in names)):
        base = {**arch_fixed, **chosen, **dict(zip(names, combo))}
        cfg = None
        for d, h in itertools.product(widths, heads):  # d ascending: the first valid one is the narrowest
            values = {**base, **({"d_model": d} if d is not None else {}), **({"n_heads": h} if h is not None else {})}
            try:
                cfg = ArchConfig(**values)
                break
            except ValidationError as err:
                last_error = config_error_message(err)
        if cfg is None:
            continue
        cost = flops_per_token(cfg).executed
        if best is None or cost < best[0]:
            best = (cost, cfg)
    return (best[1] if best else None), last_error


def describe(cfg: ArchConfig) -> str:
    """A short one-line description of the knobs that matter for cost."""
    text = (f"n_layers={cfg.n_layers} d_model={cfg.d_model} n_heads={cfg.n_heads} "
            f"mlp_ratio={cfg.mlp_ratio:g} residual={cfg.residual}")
    if cfg.mod_rate:
        text += f" mod_rate={cfg.mod_rate:g} mod_every={cfg.mod_every}"
    return text + f" seq_len={cfg.seq_len} vocab_size={cfg.vocab_size}"

