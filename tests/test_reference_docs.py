"""docs/reference.md's layout table lists every module of the four packages under its package, and nothing else."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"search_spaces": ROOT / "search_spaces" / "residual_lm", "workers": ROOT / "workers"}
PACKAGES |= {"nas": ROOT / "nas", "dashboard": ROOT / "dashboard"}


def listed_modules() -> dict[str, set[str]]:
    """package -> the modules its rows of the layout table name (paths inside the package's folder of modules)."""
    table = (ROOT / "docs" / "reference.md").read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    listed: dict[str, set[str]] = {}
    package = None
    for row in table.splitlines():
        first = row.split("|")[1] if row.startswith("|") else ""
        if header := re.match(r"\s*\*\*`(\w+)/", first):
            package = header.group(1)
            continue
        if package in PACKAGES:
            listed.setdefault(package, set()).update(re.findall(r"`([\w/]+\.py)`", first))
    return listed


def test_every_module_is_listed_under_its_package_in_the_reference():
    listed = listed_modules()
    for package, folder in PACKAGES.items():
        modules = {p.relative_to(folder).as_posix() for p in folder.rglob("*.py") if p.name != "__init__.py"}
        assert modules - listed.get(package, set()) == set(), f"{package}: modules missing from docs/reference.md"
        assert listed.get(package, set()) - modules == set(), f"{package}: docs/reference.md lists missing modules"
