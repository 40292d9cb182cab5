"""The user's own candidates: `nas search --candidates FILE` ranks exactly the configs FILE lists.

FILE is YAML:

    candidates:
      - {residual: nag, n_layers: 24, d_model: 1024, n_heads: 16}
      - {residual: cascaded, n_layers: 16, d_model: 1280, n_heads: 20, mod_rate: 0.5}

Each entry gives some of a candidate's knobs (`CANDIDATE_KNOBS`); one it leaves out takes its config's default
(`ArchConfig`, `OptimConfig`: what a pretraining run of that config would use), never a sampled one, while the
fields every trial of the search shares (the context, the vocabulary, the batch, the learning-rate schedule) stay the
search's. `load_candidates` refuses, in one line naming the candidate's index and the field, a file that is missing,
not YAML, or lists no candidates, and a candidate with an unknown knob, a value its field rejects, no valid model
(say `d_model` not divisible by `n_heads`) or the same config as an earlier one. `outside_the_space` says, one line
per candidate, where a valid candidate leaves the space's ranges: it is trained anyway, the user asked for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .loading import read_yaml
from .messages import pretty_message
from .spec import (
    CANDIDATE_KNOBS,
    KNOWN_FIELDS,
    CategoricalParam,
    SearchSpace,
    SpaceError,
    build_configs,
    check_knob,
    shared_fields,
)

__all__ = ["CandidatesError", "load_candidates", "outside_the_space", "with_candidates"]


class CandidatesError(ValueError):
    """A candidates file that cannot be searched; the message is one line naming the file, the candidate and the
    field."""


def load_candidates(path: str | Path, space: SearchSpace) -> tuple[dict[str, Any], ...]:
    """The candidates of `path`, each its knobs as given (coerced by their fields), in the file's order; every one a
    valid model with `space`'s shared fields. Raises CandidatesError (module docstring)."""
    source = f"--candidates {path}"
    try:
        raw = read_yaml(Path(path), source)
    except SpaceError as err:
        raise CandidatesError(str(err)) from None
    if not isinstance(raw, dict) or "candidates" not in raw:
        got = type(raw).__name__ if not isinstance(raw, dict) else f"keys {', '.join(map(str, raw)) or 'none'}"
        raise CandidatesError(f"{source}: must be a mapping with the key candidates: a list of configs (got {got})")
    if set(raw) - {"candidates", "family"}:
        extra = ", ".join(sorted(map(str, set(raw) - {"candidates", "family"})))
        raise CandidatesError(f"{source}: unknown key {extra}; accepted: candidates (and family: {space.family})")
    if raw.get("family", space.family) != space.family:
        raise CandidatesError(f"{source}: family: the search's family is {space.family}, not {raw['family']!r}")
    entries = raw["candidates"]
    if not isinstance(entries, list) or not entries:
        raise CandidatesError(f"{source}: candidates: must list at least one config (got {entries!r})")
    out: list[dict[str, Any]] = []
    for index, entry in enumerate(entries):
        out.append(_candidate(source, index, entry, space, out))
    return tuple(out)


def _candidate(source: str, index: int, entry: Any, space: SearchSpace, earlier: Sequence[dict]) -> dict[str, Any]:
    where = f"{source}: candidates[{index}]"
    if not isinstance(entry, dict) or not entry:
        example = "{residual: nag, n_layers: 8}"
        raise CandidatesError(f"{where}: must be a mapping of knobs, e.g. {example} (got {entry!r})")
    knobs: dict[str, Any] = {}
    for name, value in entry.items():
        if name not in CANDIDATE_KNOBS:
            raise CandidatesError(f"{where}.{name}: {_not_a_knob(str(name), space)}")
        try:
            knobs[name] = check_knob(name, value)
        except ValueError as err:
            raise CandidatesError(f"{where}.{name}: {err}") from None
    try:
        configs = build_configs({**shared_fields(space), **knobs})
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or next(iter(knobs))
        raise CandidatesError(f"{where}.{field}: {pretty_message(first)}") from None
    for other, previous in enumerate(earlier):
        if build_configs({**shared_fields(space), **previous}) == configs:
            raise CandidatesError(f"{where}: the same config as candidates[{other}] (knobs left out take defaults)")
    return knobs


def _not_a_knob(name: str, space: SearchSpace) -> str:
    if name in KNOWN_FIELDS:
        return (
            f"is the search's, the same for every candidate (the space's fixed {name}, or its default); "
            f"a candidate's knobs: {', '.join(CANDIDATE_KNOBS)}"
        )
    return f"not a knob of {space.family}; a candidate's knobs: {', '.join(CANDIDATE_KNOBS)}"


def outside_the_space(candidates: Sequence[dict[str, Any]], space: SearchSpace) -> list[str]:
    """One line per candidate with a knob outside `space`'s range for it (or other than its fixed value)."""
    notes = []
    for index, knobs in enumerate(candidates):
        outside = []
        for name, value in knobs.items():
            p = space.params.get(name)
            if p is not None and isinstance(p, CategoricalParam) and value not in p.choices:
                outside.append(f"{name} {value!r} not among {list(p.choices)}")
            elif p is not None and not isinstance(p, CategoricalParam) and not p.low <= value <= p.high:
                outside.append(f"{name} {value:g} outside {p.low:g}..{p.high:g}")
            elif name in space.fixed and value != space.fixed[name]:
                outside.append(f"{name} {value!r} where the space fixes {space.fixed[name]!r}")
        if outside:
            notes.append(f"candidates[{index}]: {'; '.join(outside)}: trained as asked")
    return notes


def with_candidates(space: SearchSpace, candidates: Sequence[dict[str, Any]]) -> SearchSpace:
    """The space of a search of `candidates`: the fields every trial of `space` shares, and the candidates."""
    return SearchSpace(family=space.family, fixed=shared_fields(space), candidates=tuple(candidates))
