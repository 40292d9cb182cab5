"""The project's import layering, read from the source with `ast` (no project module is imported).

Packages, top to bottom: dashboard -> nas -> workers -> search_spaces. A module may import modules of
its own package or of a package below it, never above; and no modules may import each other in a
cycle. The graph has one node per module (`pkg/__init__.py` is `pkg`) and one edge per import:
- relative imports are resolved; `from pkg import name` is an edge to `pkg.name` when that is a
  module (file or package folder), else to `pkg`; only edges to the four packages are kept;
- importing `pkg.sub` is an edge to `pkg.sub` alone, not to `pkg` (Python runs `pkg/__init__.py`
  first, but counting that would make every `__init__` that re-exports a submodule a cycle);
- imports inside functions count (they run when the function does); imports under
  `if TYPE_CHECKING:` do not (they never run); `importlib` calls and strings are not imports.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

LAYERS = ("dashboard", "nas", "workers", "search_spaces")  # top to bottom


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


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node in `tree`, at any depth, except in the body of `if TYPE_CHECKING:`."""
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
        else:
            todo.extend(ast.iter_child_nodes(node))


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


def test_no_upward_imports():
    bad = upward_edges(build_graph(repo_root(), LAYERS), LAYERS)
    assert not bad, (
        "imports of a package above the importer (" + " -> ".join(LAYERS) + "):\n" + "\n".join(map(str, bad))
    )


def test_no_cycles_inside_a_package():
    edges = build_graph(repo_root(), LAYERS)
    found = cycles(edges)
    report = [", ".join(c) + ":\n" + "\n".join(f"    {e}" for e in edges if e.src in c and e.dst in c) for c in found]
    assert not found, "import cycles:\n" + "\n".join(report)


def test_checker_finds_a_lazy_cycle_and_an_upward_import(tmp_path):
    files = {
        "a/__init__.py": "from .x import f\n",
        "a/x.py": "import a.y\n\ndef f():\n    pass\n",
        "a/y.py": "def g():\n    from .x import f  # lazy, still an edge\n    return f\n",
        "a/sub/__init__.py": "",
        "a/sub/m.py": "import os\nfrom .. import x\nfrom ..y import g\n",
        "b/__init__.py": "",
        "b/z.py": "import importlib.util\nfrom typing import TYPE_CHECKING\n\nfrom a import f\n\n"
        "if TYPE_CHECKING:\n    from a.sub import m\nelse:\n    m = None\n"
        "SPEC = importlib.util.find_spec('a.y')\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    edges = build_graph(tmp_path, ("a", "b"))
    assert {(e.src, e.dst) for e in edges} == {
        ("a", "a.x"),
        ("a.x", "a.y"),
        ("a.y", "a.x"),
        ("a.sub.m", "a.x"),
        ("a.sub.m", "a.y"),
        ("b.z", "a"),
    }
    assert [str(e) for e in upward_edges(edges, ("a", "b"))] == ["b.z -> a (b/z.py:4)"]  # not the TYPE_CHECKING one
    assert upward_edges(edges, ("b", "a")) == []
    assert cycles(edges) == [["a.x", "a.y"]]
    assert cycles(edges + [Edge("b.z", "b.z", "b/z.py", 1)]) == [["a.x", "a.y"], ["b.z"]]
