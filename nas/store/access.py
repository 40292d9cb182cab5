"""The store's access layer: `Store(url)` writes searches and trials and serves read-only rows.

Every public method is one `with self._session() as s:` block, the single context manager of `session.py`
that owns the transaction and turns database errors into `StoreError`. The reads (`reads.py`, the dashboard's
and the CLI's API) and the writes (`writes.py`, the driver's and the workers') are apart; `Store` is both.
"""

from __future__ import annotations

from .reads import StoreReads
from .writes import StoreWrites


class Store(StoreWrites, StoreReads):
    """The resnas database at `url`: its reads and writes on one session (opening and closing it: `StoreSession`)."""
