"""The resnas database: searches, trials and their results (see `Store`)."""

from .access import Store
from .engine import call_with_retries, default_url, is_connection_error, retry_window
from .migrations import (
    MIGRATIONS,
    SCHEMA_LOCK_KEY,
    SCHEMA_VERSION,
    Migration,
    SchemaVersionError,
    ensure_schema,
    schema_lock,
)
from .rows import (
    CurvePointRow,
    RungRow,
    SearchExists,
    SearchRow,
    SearchSummary,
    StoreError,
    TrialRow,
    UnknownSearch,
    UnknownTrial,
)
from .schema import SEARCH_STATUSES, TRIAL_STATUSES, SearchStatus, sanitise_json

STORAGE_ENV = "RESNAS_STORAGE"  # the store URL when none is given, ahead of default_url (CLI and dashboard)

__all__ = [
    "CurvePointRow",
    "MIGRATIONS",
    "Migration",
    "SCHEMA_LOCK_KEY",
    "SCHEMA_VERSION",
    "RungRow",
    "SEARCH_STATUSES",
    "SearchStatus",
    "STORAGE_ENV",
    "SchemaVersionError",
    "SearchExists",
    "SearchRow",
    "SearchSummary",
    "Store",
    "StoreError",
    "TRIAL_STATUSES",
    "TrialRow",
    "call_with_retries",
    "is_connection_error",
    "retry_window",
    "UnknownSearch",
    "UnknownTrial",
    "default_url",
    "ensure_schema",
    "sanitise_json",
    "schema_lock",
]
