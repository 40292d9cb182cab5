"""One-line error messages from pydantic validation errors, for the CLI's inputs (space, budget, settings).

`pretty_message(error)` words one pydantic error entry briefly and names what it got
(`must be > 0 (got -1.0)`); `options_message(err)` words a whole error of a model whose fields are CLI
options as one line naming each option (`--trial-flops: must be > 0 (got -1.0)`); `raise_errors(errors)`
raises one `ValidationError` carrying several located messages from inside a validator, so pydantic
prefixes the outer field path to each.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

__all__ = ["YAML_FLOAT_HINT", "options_message", "pretty_message", "raise_errors"]

# A YAML 1.1 quirk: PyYAML reads `1e-3` (no dot) as a string.
YAML_FLOAT_HINT = " (YAML reads 1e-3 as text: write 1.0e-3)"
_CUSTOM = "resnas"  # the error type of messages raised by `raise_errors`: already worded

_PRETTY = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "finite_number": "must be a finite number",
    "missing": "required",
    "extra_forbidden": "unknown key",
    "unexpected_keyword_argument": "unknown key",  # a pydantic dataclass's extra_forbidden
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


def raise_errors(errors: list[tuple[tuple, str, Any]], title: str = "SearchSpace") -> None:
    """Raise one ValidationError carrying each (loc, message, input); pydantic prefixes outer locs."""
    if errors:
        raise ValidationError.from_exception_data(
            title,
            [
                InitErrorDetails(type=PydanticCustomError(_CUSTOM, msg), loc=loc, input=value)
                for loc, msg, value in errors
            ],
        )


def pretty_message(error: Any) -> str:
    """One pydantic error entry as `must be > 0 (got -1.0)`: short wording, the offending input."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == _CUSTOM:  # our own messages already say what they got
        return str(error["msg"])
    ctx = {k: f"{v:g}" if isinstance(v, float) else v for k, v in ctx.items()}
    msg = _PRETTY[kind].format(**ctx) if kind in _PRETTY else error["msg"].removeprefix("Value error, ")
    value = error.get("input")
    if kind in ("missing", "extra_forbidden", "unexpected_keyword_argument") or isinstance(value, (dict, list, tuple)):
        return msg
    hint = YAML_FLOAT_HINT if isinstance(value, str) and _looks_numeric(value) else ""
    return f"{msg} (got {value!r}){hint}"


def _cli_option(loc: tuple, names: Mapping[tuple[str, ...], str]) -> str:
    """The CLI option of a field's location: `names[loc]`, else its first part with dashes (`trial_flops` ->
    `--trial-flops`)."""
    key = tuple(str(part) for part in loc)
    return names.get(key) or names.get(key[:1]) or "--" + key[0].replace("_", "-")


def options_message(err: ValidationError, names: Mapping[tuple[str, ...], str] | None = None) -> str:
    """One line naming each offending CLI option, `; `-separated: `--trial-flops: must be > 0 (got -1.0)`.

    An entry's location is the field (its option; `names` maps a location to its option where that is not the
    field's name with dashes); an entry without one (a model-level check) is its message alone.
    """
    names = names or {}
    return "; ".join(
        f"{_cli_option(e['loc'], names)}: {pretty_message(e)}" if e["loc"] else pretty_message(e) for e in err.errors()
    )


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
