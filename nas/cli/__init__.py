"""The `nas` command line: one small function per command (`commands`; those that read a search in `reports`),
the checks of what it is given (`inputs`), the front as a terminal table (`front_table`), the Hugging Face
commands (`hf`), `nas dashboard`'s launcher and `nas families`. `python -m nas.cli` is the `nas` console script."""

from .commands import app, main

__all__ = ["app", "main"]
