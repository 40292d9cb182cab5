"""Export bundle: a zip of the YAML configs `nas.export.export_configs` writes for chosen trials."""

from __future__ import annotations

import io
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

from nas.export import export_configs
from nas.store import Store


def export_bundle(store: Store, search: str, trial_numbers: Iterable[int]) -> bytes:
    """A zip (bytes) of the YAML file `nas.export.export_configs` writes for each trial.

    Only reads the store: the YAML files are written into a temporary folder, not the database.
    Raises what export_configs raises (`ExportError`, `StoreError`).
    """
    buffer = io.BytesIO()
    with tempfile.TemporaryDirectory(prefix="resnas-export-") as tmp:
        out_dir = Path(tmp)
        for number in trial_numbers:
            export_configs(store, search, out_dir, pareto=False, trial=int(number))
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
            for path in sorted(out_dir.rglob("*")):
                if path.is_file() and path.suffix in (".yaml", ".yml"):
                    bundle.write(path, path.relative_to(out_dir).as_posix())
    return buffer.getvalue()
