"""The project's import layering, read from the source with `ast` (no project module is imported).

Packages, top to bottom: dashboard -> nas -> workers -> search_spaces. A module may import modules of
its own package or of a package below it, never above; and no modules may import each other in a
cycle. The graph has one node per module (`pkg/__init__.py` is `pkg`) and one edge per import:
- relative imports are resolved; `from pkg import name` is an edge to `pkg.name` when that is a
  module (file or package folder), else to `pkg`; only edges to the four packages are kept;
- importing `pkg.sub` is an edge to `pkg.sub` alone, not to `pkg` (Python runs `pkg/__init__.py`
  first, but counting that would make every `__init__` that re-exports a submodule a cycle);
- imports inside functions count (they run when the function does), and so do imports under
  `if TYPE_CHECKING:` (they never run, but two modules that name each other's types still depend
  on each other: a cycle a type checker alone sees is a cycle); `importlib` calls and strings are
  not imports.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

LAYERS = ("dashboard", "nas", "workers", "search_spaces")  # top to bottom
# The parts of `nas` and `workers` (their folders, and the shared modules beside them), top to bottom: a part
# imports only the parts below it. Each package's own `__init__` (its public names) is outside the order.
ROOMS = {
    "nas": (
        "nas.cli",
        "nas.search",
        "nas.export",
        "nas.search_answer",
        "nas.answer",
        "nas.space",
        "nas.store",
        "nas.version",
    ),
    "workers": (
        "workers.release",
        "workers.pretrain",
        "workers.trial",
        "workers.training",
        "workers.ladder",
        "workers.data",
        "workers.status",
        "workers.strict_json",
        "workers.lazy",
    ),
}


class Edge(NamedTuple):
    src: str
    dst: str
    file: str  # relative to the root, POSIX
    line: int

    def __str__(self) -> str:
        return f"{self.src} -> {self.dst} ({self.file}:{self.line})"


def repo_root() -> Path:
    """The nearest folder above this file that holds `pyproject.toml`."""
    return next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node in `tree`, at any depth (functions and `if TYPE_CHECKING:` included)."""
    return (node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))


def build_graph(root: Path, packages: tuple[str, ...]) -> list[Edge]:
    """The import edges between the modules of `packages` (folders under `root`), sorted."""
    modules: dict[str, tuple[Path, bool]] = {}  # name -> (file, is a package's __init__)
    for pkg in packages:
        for path in (root / pkg).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            is_init = parts[-1] == "__init__"
            modules[".".join(parts[:-1] if is_init else parts)] = (path, is_init)

    def known(name: str) -> str | None:  # the longest prefix of `name` that is a project module
        parts = name.split(".")
        return next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in modules), None)

    edges = set()
    for src, (path, is_init) in modules.items():
        package = src.split(".") if is_init else src.split(".")[:-1]
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [known(alias.name) for alias in node.names]
            else:
                if node.level > len(package):
                    continue  # beyond the top-level package: not a valid import
                base = ".".join(package[: len(package) - node.level + 1] if node.level else [])
                base = ".".join(filter(None, [base, node.module or ""]))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else known(base) for a in node.names]
            file = path.relative_to(root).as_posix()
            edges.update(Edge(src, dst, file, node.lineno) for dst in targets if dst is not None)
    return sorted(edges)


def upward_edges(edges: list[Edge], layers: tuple[str, ...]) -> list[Edge]:
    """The edges from a package to one above it in `layers` (listed top to bottom)."""
    rank = {pkg: i for i, pkg in enumerate(layers)}
    return [e for e in edges if rank[e.dst.split(".")[0]] < rank[e.src.split(".")[0]]]


def room_of(module: str, rooms: tuple[str, ...]) -> int | None:
    """The index of the room (in `rooms`, top to bottom) that `module` belongs to; None outside them."""
    return next((i for i, room in enumerate(rooms) if module == room or module.startswith(room + ".")), None)


def upward_room_edges(edges: list[Edge], rooms: dict[str, tuple[str, ...]]) -> list[Edge]:
    """The edges, inside one package of `rooms`, from a part to one above it."""
    bad = []
    for e in edges:
        package = e.src.split(".")[0]
        if package not in rooms or e.dst.split(".")[0] != package:
            continue
        src, dst = room_of(e.src, rooms[package]), room_of(e.dst, rooms[package])
        if src is not None and dst is not None and dst < src:
            bad.append(e)
    return bad


def cycles(edges: list[Edge]) -> list[list[str]]:
    """Every strongly connected component with a cycle (2+ modules, or one that imports itself), sorted.

    A module's component is the set of modules it reaches that reach it back; the graph has a few
    dozen nodes, so one search per node is plenty fast and simpler than Tarjan's algorithm.
    """
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.src, set()).add(e.dst)
        graph.setdefault(e.dst, set())

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    reachable = {m: reach(m) for m in graph}
    components = {frozenset(n for n in reachable[m] if m in reachable[n]) for m in graph if m in reachable[m]}
    return sorted(sorted(c) for c in components)


def upward_report(edges: list[Edge], layers: tuple[str, ...]) -> str:
    """What `test_no_upward_imports` prints: one line per upward edge ("" if none)."""
    bad = upward_edges(edges, layers)
    if not bad:
        return ""
    return f"imports of a package above the importer ({' -> '.join(layers)}):\n" + "".join(f"{e}\n" for e in bad)


def cycle_report(edges: list[Edge]) -> str:
    """What `test_no_cycles_inside_a_package` prints: each cycle's modules, then the edges between them ("" if none)."""
    found = cycles(edges)
    if not found:
        return ""
    report = "import cycles:\n"
    for c in found:
        report += ", ".join(c) + ":\n" + "".join(f"    {e}\n" for e in edges if e.src in c and e.dst in c)
    return report


def test_no_upward_imports():
    report = upward_report(build_graph(repo_root(), LAYERS), LAYERS)
    assert not report, report


def test_the_parts_of_nas_and_workers_import_only_the_parts_below_them():
    edges = build_graph(repo_root(), LAYERS)
    bad = upward_room_edges(edges, ROOMS)
    assert not bad, "imports of a part above the importer:\n" + "".join(f"{e}\n" for e in bad)
    for package, rooms in ROOMS.items():  # every module of the package lies in a room (its __init__ aside)
        modules = {e.src for e in edges if e.src.split(".")[0] == package} - {package}
        assert {m for m in modules if room_of(m, rooms) is None} == set(), f"{package}: modules outside its parts"


def test_the_room_check_finds_an_upward_import():
    edges = [Edge("p.low.a", "p.high.b", "p/low/a.py", 3), Edge("p.high.b", "p.low.a", "p/high/b.py", 1)]
    assert upward_room_edges(edges, {"p": ("p.high", "p.low")}) == [edges[0]]
    assert upward_room_edges(edges, {"p": ("p.high",)}) == []  # outside the rooms: not judged


def test_no_cycles_inside_a_package():
    report = cycle_report(build_graph(repo_root(), LAYERS))
    assert not report, report


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_checker_reads_lazy_relative_and_type_checking_imports(tmp_path):
    write_tree(
        tmp_path,
        {
            "a/__init__.py": "from .x import f\n",
            "a/x.py": "import a.y\n\ndef f():\n    pass\n",
            "a/y.py": "def g():\n    from .x import f  # lazy, still an edge\n    return f\n",
            "a/sub/__init__.py": "",
            "a/sub/m.py": "import os\nfrom .. import x\nfrom ..y import g\n",
            "b/__init__.py": "",
            "b/z.py": "import importlib.util\nfrom typing import TYPE_CHECKING\n\nfrom a import f\n\n"
            "if TYPE_CHECKING:\n    from a.sub import m\nelse:\n    m = None\n"
            "SPEC = importlib.util.find_spec('a.y')\n",
        },
    )
    edges = build_graph(tmp_path, ("a", "b"))
    assert {(e.src, e.dst) for e in edges} == {
        ("a", "a.x"),
        ("a.x", "a.y"),
        ("a.y", "a.x"),
        ("a.sub.m", "a.x"),
        ("a.sub.m", "a.y"),
        ("b.z", "a"),
        ("b.z", "a.sub.m"),  # under TYPE_CHECKING: an edge all the same
    }
    assert [str(e) for e in upward_edges(edges, ("a", "b"))] == ["b.z -> a (b/z.py:4)", "b.z -> a.sub.m (b/z.py:7)"]
    assert upward_edges(edges, ("b", "a")) == []
    assert upward_report(edges, ("b", "a")) == ""
    assert "b.z -> a.sub.m (b/z.py:7)" in upward_report(edges, ("a", "b"))


def test_checker_finds_cycles_inside_a_package(tmp_path):
    """a.x -> a.y -> a.x at import time; b.p <-> b.q behind TYPE_CHECKING; c.r -> c.s -> c.t -> c.r; d acyclic."""
    write_tree(
        tmp_path,
        {
            "a/__init__.py": "",
            "a/x.py": "from . import y\n",
            "a/y.py": "from .x import *\n",
            "b/__init__.py": "",
            "b/p.py": "from .q import Q\n",
            "b/q.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .p import P\n\nQ = 1\n",
            "c/__init__.py": "",
            "c/r.py": "import c.s\n",
            "c/s.py": "import c.t\n",
            "c/t.py": "def h():\n    import c.r\n",
            "d/__init__.py": "from .u import U\n",
            "d/u.py": "from d.v import V as U\n",
            "d/v.py": "V = 1\n",
        },
    )
    edges = build_graph(tmp_path, ("a", "b", "c", "d"))
    assert cycles(edges) == [["a.x", "a.y"], ["b.p", "b.q"], ["c.r", "c.s", "c.t"]]
    report = cycle_report(edges)
    assert "b.p, b.q:\n    b.p -> b.q (b/p.py:1)\n    b.q -> b.p (b/q.py:4)\n" in report
    assert cycles(edges + [Edge("d.v", "d.v", "d/v.py", 1)])[-1] == ["d.v"]  # a module that imports itself
    assert cycle_report([e for e in edges if e.src.startswith("d")]) == ""
