"""Reading a search-space YAML file: safe YAML with unique keys, then the spec's validation.

`load_space(path)` (None = the shipped default) returns a validated `SearchSpace` or raises
`SpaceError` with one line naming the file and the field path, e.g. `space.yaml: params.ancre_tau.low:
must be > 0 for a log scale (got 0.0)`, or the line and column of a YAML syntax error.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml
from pydantic import ValidationError

from .messages import pretty_message
from .spec import _KINDS, FloatParam, IntParam, SearchSpace, SpaceError

__all__ = ["default_space_path", "load_space", "read_yaml", "space_error_message", "space_from_dict"]


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
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_space(path: str | Path | None = None) -> SearchSpace:
    """Read and validate a space file (None = the shipped default). Raises SpaceError (one line)."""
    file = Path(path) if path is not None else default_space_path()
    source = str(path) if path is not None else "search_spaces/residual_lm/space.yaml"
    raw = read_yaml(file, source)
    if not isinstance(raw, dict):
        raise SpaceError(f"{source}: must be a mapping with keys family, fixed, params (got {type(raw).__name__})")
    return space_from_dict(raw, source)


def read_yaml(file: Path, source: str):
    """The YAML document in `file` (plain types, each key once); SpaceError naming `source` (and the line and column
    of a syntax error) otherwise."""
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
    return raw


def space_from_dict(raw: dict, source: str = "space") -> SearchSpace:
    """Validate an already-parsed spec; raises SpaceError naming `source` and the field path."""
    try:
        return SearchSpace.model_validate(raw)
    except ValidationError as err:  # the validators' own errors arrive wrapped in it too
        raise SpaceError(space_error_message(err, source)) from None
