"""docs/reference.md's layout table lists every module of the four packages under its package (and, in `nas` and
`workers`, under the folder it lives in), and nothing else; every folder of `nas` and `workers` is a listed part
whose `__init__` says in its first line what it holds."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"search_spaces": ROOT / "search_spaces" / "residual_lm", "workers": ROOT / "workers"}
PACKAGES |= {"nas": ROOT / "nas", "dashboard": ROOT / "dashboard"}
ROOMED = ("nas", "workers")  # packages whose folders are their parts, each with its own header row


def layout_rows() -> list[str]:
    table = (ROOT / "docs" / "reference.md").read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    return [row.split("|")[1] for row in table.splitlines() if row.startswith("|")]


def listed_modules() -> dict[str, set[str]]:
    """package -> the modules its rows of the layout table name (paths inside the package's folder of modules)."""
    listed: dict[str, set[str]] = {}
    package, room = None, ""
    for first in layout_rows():
        if header := re.match(r"\s*\*\*`(\w+)/([\w/]*)`", first):
            package, room = header.group(1), header.group(2)
            continue
        if package in PACKAGES:
            names = re.findall(r"`([\w/]+\.py)`", first)
            listed.setdefault(package, set()).update((room + name) if package in ROOMED else name for name in names)
    return listed


def listed_rooms() -> set[str]:
    """The folders the table has a header row for ("nas/answer/", ...)."""
    return {m.group(1) for first in layout_rows() if (m := re.match(r"\s*\*\*`([\w/]+/)`", first))}


def test_every_module_is_listed_under_its_package_in_the_reference():
    listed = listed_modules()
    for package, folder in PACKAGES.items():
        modules = {p.relative_to(folder).as_posix() for p in folder.rglob("*.py") if p.name != "__init__.py"}
        assert modules - listed.get(package, set()) == set(), f"{package}: modules missing from docs/reference.md"
        assert listed.get(package, set()) - modules == set(), f"{package}: docs/reference.md lists missing modules"


def test_every_part_of_nas_and_workers_is_a_listed_folder_that_says_what_it_holds():
    rooms = listed_rooms()
    for package in ROOMED:
        for init in sorted((ROOT / package).rglob("__init__.py")):
            folder = init.parent.relative_to(ROOT).as_posix() + "/"
            assert folder in rooms, f"{folder} has no header row in docs/reference.md's layout table"
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            assert doc.strip() and not doc.startswith("TODO"), (
                f"{init.relative_to(ROOT)}: no docstring saying what it holds"
            )
