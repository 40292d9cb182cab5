"""The command line and environment `nas dashboard` runs Streamlit with."""

from __future__ import annotations

import sys
from pathlib import Path

from ..store import STORAGE_ENV
from .inputs import fail, storage_url


def dashboard_launch(storage: str | None, address: str, port: int) -> tuple[list[str], dict]:
    """The Streamlit command line and environment that `nas dashboard` runs.

    The store URL (`storage_url`: --storage, else $RESNAS_STORAGE, else resnas.db in the cwd) travels
    in the environment, never in argv, so a password in it does not show in `ps`.
    """
    import importlib.util
    import ipaddress
    import os

    try:
        ipaddress.ip_address(address)
    except ValueError:
        fail(
            f"--address: must be an IP address to listen on, e.g. 127.0.0.1 (this machine only) or 0.0.0.0 "
            f"(inside a container), not {address!r}"
        )
    if not 1 <= port <= 65535:
        fail(f"--port: must be in 1..65535, not {port}")
    spec = importlib.util.find_spec("dashboard")  # found, not imported: dashboard depends on nas, not back
    if spec is None or spec.origin is None:
        fail("the dashboard package is not installed")
    app_path = Path(spec.origin).with_name("app.py")
    env = {**os.environ, STORAGE_ENV: storage_url(storage)}
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app_path),
        "--server.address",
        address,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
    ]
    return cmd, env
