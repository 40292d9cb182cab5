"""Strict JSON: `sanitise_json` turns any result record into data every JSON reader accepts."""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["sanitise_json"]


def sanitise_json(value: Any) -> Any:
    """`value` as strict JSON data: non-finite floats -> None, recursively; tuples -> lists; keys -> str.

    NaN and +/-inf are not JSON: Python's `json` would write `NaN`/`Infinity`, which PostgreSQL
    rejects and other readers choke on. Numpy-style scalars become plain int/float.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, dict):
        return {str(k): sanitise_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [sanitise_json(v) for v in value]
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        x = float(value)
        return x if math.isfinite(x) else None
    return value  # anything else: let the JSON serialiser accept or reject it
