"""`code_version()`: which code ran a search or wrote an export."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

__all__ = ["code_version"]


def code_version() -> str:
    """The installed resnas version plus the git commit when run from a checkout."""
    try:
        ver = version("resnas")
    except PackageNotFoundError:
        ver = "unknown"
    head = Path(__file__).resolve().parents[1] / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        commit = (head.parent / ref.split(" ", 1)[1]).read_text().strip() if ref.startswith("ref:") else ref
        return f"{ver}+{commit[:12]}"
    except (OSError, IndexError):
        return ver
