"""Export bundle: a zip of the YAML configs of chosen trials.

PLACEHOLDER: `nas.export.export_configs(store, name, out_dir, pareto=False, trial=N)` is being
written alongside this dashboard. It is imported lazily, inside `export_bundle`, so the rest of
the dashboard works without it; the Export page shows "export not available" while the import
fails. Revisit once `nas.export` lands (signature, file layout, errors it raises).
"""

from __future__ import annotations

import importlib
import io
import tempfile
import zipfile
from pathlib import Path
from typing import Iterable


def export_available() -> bool:
    """Whether `nas.export.export_configs` can be imported."""
    try:
        return hasattr(importlib.import_module("nas.export"), "export_configs")
    except ImportError:
        return False


def export_bundle(store_url: str, search: str, trial_numbers: Iterable[int]) -> bytes:
    """PLACEHOLDER. A zip (bytes) of the YAML files `nas.export.export_configs` writes for each trial.

    Raises ImportError when `nas.export` is not there yet (the page turns that into an info box).
    Only reads the store: export_configs writes YAML files into a temporary folder, not the database.
    """
    from nas.export import export_configs  # lazy: the module is being written (see the module docstring)
    from nas.store import Store

    buffer = io.BytesIO()
    with tempfile.TemporaryDirectory(prefix="resnas-export-") as tmp, Store(store_url) as store:
        out_dir = Path(tmp)
        for number in trial_numbers:
            export_configs(store, search, out_dir, pareto=False, trial=int(number))
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
            for path in sorted(out_dir.rglob("*")):
                if path.is_file() and path.suffix in (".yaml", ".yml"):
                    bundle.write(path, path.relative_to(out_dir).as_posix())
    return buffer.getvalue()
