"""Ctrl-C and SIGTERM on the search driver: the first signal stops the search gently, the second at once.

The contract, for `nas search` and `nas resume`:

- **First signal** (SIGINT from a terminal, SIGTERM from a scheduler): no new trial is launched.
  A running trial ends at its next rung (the rung is measured and stored first) or when the grace
  period (`--stop-grace`, 120 s by default, from the first signal) runs out, whichever comes first. Trials ended this
  way are stored `interrupted` (not a failure; their measured rungs are kept), their Optuna trials
  become FAIL (samplers ignore them), the search is left `interrupted`, and the command exits with
  128 + the signal's number after one line saying how to resume.
- **Second signal**: every running trial is stopped at once, with the same bookkeeping.

`nas resume` then runs the trials still missing; completed trials are never run again.

Ray Tune's own SIGINT handler is switched off (`TUNE_DISABLE_SIGINT_HANDLER`), so that both
signals follow this contract; the handlers are installed only while the Tuner runs, in the main
thread, and the previous ones are restored after.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SearchInterrupted(Exception):
    """The search stopped on a signal; its store is consistent and `nas resume` finishes it."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, the shell's convention for a process ended by a signal."""
        return 128 + self.signum


class StoreOutage(Exception):
    """The store stayed unreachable past its retry window: the search stopped launching trials, kept what
    it could not write in its spool (`nas.search.spool`), and `nas resume` writes it and finishes the search."""

    exit_code = 75  # EX_TEMPFAIL: try again later

    def __init__(self, kept: int, spool: str, window_s: float):
        self.kept, self.spool, self.window_s = kept, spool, window_s
        super().__init__(
            f"the store stayed unreachable past its {window_s:.0f} s retry window; the search stopped launching "
            f"trials, and {kept} results it could not write are kept in {spool}"
        )


class StopRequest:
    """What the driver's signal handlers have asked for: nothing, a gentle stop, or an immediate one; or,
    with `outage`, a gentle stop because the store is unreachable past its retry window."""

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self.signum: int | None = None
        self.first_at: float | None = None
        self.immediate = False
        self.outage = False

    @property
    def requested(self) -> bool:
        return self.signum is not None or self.outage

    def store_unreachable(self) -> None:
        """Stop launching trials: the store cannot take them; running trials finish (their results spooled)."""
        if not self.requested:
            self.first_at = time.monotonic()
            log.error("the store is unreachable past its retry window: no new trials; running trials finish")
        self.outage = True

    def grace_over(self) -> bool:
        return self.first_at is not None and time.monotonic() - self.first_at >= self.grace_s

    def handle(self, signum: int, _frame=None) -> None:
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum, self.first_at = signum, time.monotonic()
            log.warning(
                "%s: stopping the search: no new trials; running trials end at their next rung or in %.0f s; "
                "send it again to stop at once",
                name,
                self.grace_s,
            )
        elif not self.immediate:
            self.immediate = True
            log.warning("%s again: stopping every running trial now", name)


@contextmanager
def stop_signals(request: StopRequest) -> Iterator[StopRequest]:
    """SIGINT and SIGTERM go to `request` while the block runs (main thread only; elsewhere a no-op)."""
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {sig: signal.signal(sig, request.handle) for sig in STOP_SIGNALS}
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
