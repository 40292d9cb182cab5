"""`TokenisingProgress`: a progress bar that appears only once a job has run for a few seconds.

Tokenising the shipped corpus takes about a second and shows nothing; a corpus of gigabytes shows a bar (on
stderr, transient) from `DELAY_S` on, advanced by characters done, with the rate and the time left.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

DELAY_S = 3.0  # a job shorter than this shows no bar


class TokenisingProgress:
    """A context manager: `advance(n)` after each n characters; the bar starts once `DELAY_S` have passed."""

    def __init__(self, label: str, total: int, delay_s: float = DELAY_S):
        self.label, self.total, self.delay_s = label, total, delay_s
        self.done = 0
        self.started = time.perf_counter()
        self.bar: Any = None  # a rich Progress once shown
        self.task: Any = None

    def __enter__(self) -> TokenisingProgress:
        self.started = time.perf_counter()
        return self

    def advance(self, n: int) -> None:
        self.done += n
        if self.bar is None and time.perf_counter() - self.started >= self.delay_s and self.done < self.total:
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

            self.bar = Progress(
                TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeRemainingColumn(),
                transient=True,
            )  # fmt: skip
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=self.total, completed=self.done)
        elif self.bar is not None and self.task is not None:
            self.bar.update(self.task, completed=self.done)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None):
        if self.bar is not None:
            self.bar.stop()
