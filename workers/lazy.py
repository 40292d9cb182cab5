"""Packages that name their parts without importing them: `lazy_exports` builds a package's module `__getattr__`
(PEP 562) that imports the submodule holding a name on its first use, so that importing the package (say for its
typed configs alone) does not import torch."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(package: str, where: Mapping[str, str]) -> Callable[[str], object]:
    """A module `__getattr__` for `package`: `where[name]` is the submodule (relative, e.g. ".config") defining
    `name`; an unknown name raises AttributeError as a module would."""

    def __getattr__(name: str) -> object:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name], package), name)
        setattr(importlib.import_module(package), name, value)  # later look-ups find it without this function
        return value

    return __getattr__
