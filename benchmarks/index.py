"""The benchmarks index: which script answers which question, with headline figures read from its JSON.

    python -m benchmarks.index            # print the table
    python -m benchmarks.index --write    # rewrite the table in benchmarks/README.md
    python -m benchmarks.index --check    # exit 1, naming the file, if that table is not what --write writes,
                                          # or a doc points at a make target or result file that is not there

The table has one row per `benchmarks/results/*.json`, sorted by file name within its section (`SECTIONS`:
speed and service, then experiments): the question its benchmark answers, the command that writes it, the
file, the machine of its machine record, its run time (`run_seconds` there; "not recorded" in results
written before the harness stamped it) and its headline figures. What a row says lives in
`benchmarks.entries.ENTRIES`, one `Entry` per result file: its section, the question, the command, and each
figure as a label, a key path into the JSON and a `str.format` template. A file without an entry gets a row
saying "no headline figures yet" in a last section, `UNINDEXED`; a key path the JSON lacks prints "missing"; a
JSON null prints "n/a" and a boolean "yes" or "no". An entry whose file is absent adds no row, and a section
without rows no heading.

The table sits in benchmarks/README.md between `<!-- index:start -->` and `<!-- index:end -->`; the
text outside the markers is left as it is. `--write` and `--check` also keep the root README's table of how far to
trust the answer (`benchmarks.answer_table`) in step with the results.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks import answer_table
from benchmarks.entries import ENTRIES, SECTIONS, Entry, Figure, KeyPath

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
README = HERE / "README.md"
ROOT = HERE.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), README]
MAKEFILE = ROOT / "Makefile"
START, END = "<!-- index:start -->", "<!-- index:end -->"
MISSING = "missing"
NOT_RECORDED = "not recorded"
NO_FIGURES = "no headline figures yet"
UNINDEXED = "Not in ENTRIES yet"


def lookup(data: Any, path: KeyPath) -> Any:
    """The value at `path` in `data`; KeyError when a step is absent (or a list index is out of range)."""
    for key in path:
        if isinstance(data, dict) and key in data:
            data = data[key]
        elif isinstance(data, list) and isinstance(key, int) and -len(data) <= key < len(data):
            data = data[key]
        else:
            raise KeyError(key)
    return data


def format_value(value: Any, fmt: str) -> str:
    """`fmt` applied to `value`; "yes"/"no" for a boolean, "n/a" for null, the plain text if `fmt` does not apply."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "n/a"
    try:
        return fmt.format(value)
    except (TypeError, ValueError):
        return str(value)


def figure_text(data: Any, figure: Figure) -> str:
    try:
        return f"{figure.label} {format_value(lookup(data, figure.path), figure.fmt)}"
    except KeyError:
        return f"{figure.label} {MISSING}"


def machine_text(record: Any) -> str:
    """'AMD EPYC, 2 threads, torch 2.13.0+cpu': the GPU's name in place of the CPU's when the record has one."""
    if not isinstance(record, dict):
        return MISSING
    parts = [str(record.get("gpu") or record.get("cpu") or "unknown")]
    if "threads" in record:
        parts.append(f"{record['threads']} thread{'' if record['threads'] == 1 else 's'}")
    if "torch" in record:
        parts.append(f"torch {record['torch']}")
    return ", ".join(parts)


def run_time_text(data: Any, entry: Entry | None) -> str:
    """'447 s' or '12 min' from the machine record's `run_seconds` (`harness.write_json`); 'not recorded' before."""
    try:
        seconds = lookup(data, (*(entry.machine if entry else ("machine",)), "run_seconds"))
    except KeyError:
        return NOT_RECORDED
    if not isinstance(seconds, (int, float)):
        return NOT_RECORDED
    return f"{seconds:.0f} s" if seconds < 600 else f"{seconds / 60:.0f} min"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def row(name: str, data: Any, entry: Entry | None) -> str:
    """One table row for the result file `name` holding `data` (None when it is not valid JSON)."""
    try:
        machine = machine_text(lookup(data, entry.machine if entry else ("machine",)))
    except KeyError:
        machine = MISSING
    if data is None:
        figures = "not valid JSON"
    elif entry is None or not entry.figures:
        figures = NO_FIGURES
    else:
        figures = "; ".join(figure_text(data, f) for f in entry.figures)
    question, command = (entry.question, f"`{entry.command}`") if entry else ("", "")
    cells = [question, command, f"[{name}](results/{name})", machine, run_time_text(data, entry), figures]
    return "| " + " | ".join(cell(c) for c in cells) + " |"


HEADER = [
    "| Question | Command | Result | Machine | Run time | Headline figures |",
    "| --- | --- | --- | --- | --- | --- |",
]


def render_table(results: Path, entries: Mapping[str, Entry] | None = None) -> str:
    """The Markdown tables of every `*.json` in `results`, one per section, from `entries` (default `ENTRIES`)."""
    entries = ENTRIES if entries is None else entries
    rows: dict[str, list[str]] = {section: [] for section in (*SECTIONS, UNINDEXED)}
    for path in sorted(results.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            data = None
        entry = entries.get(path.name)
        rows[entry.section if entry else UNINDEXED].append(row(path.name, data, entry))
    lines = [
        "_Generated by `python -m benchmarks.index --write` from `results/*.json`: edit `ENTRIES` in entries.py, "
        "not these tables._",
    ]
    for section, section_rows in rows.items():
        if section_rows:
            lines += ["", f"### {section}", "", *HEADER, *section_rows]
    return "\n".join(lines)


def splice(text: str, table: str, start: str = START, end: str = END) -> str:
    """`text` with what lies between the markers replaced by `table`; ValueError if the markers are not there."""
    head, found, rest = text.partition(start)
    if not found:
        raise ValueError(f"no {start} marker")
    _, found, tail = rest.partition(end)
    if not found:
        raise ValueError(f"no {end} marker after {start}")
    return f"{head}{start}\n{table}\n{end}{tail}"


def shown(path: Path) -> str:
    """`path` relative to the working directory when it lies below it (benchmarks/README.md from the repo root)."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def stale_doc_references(docs: list[Path], makefile: Path, results: Path) -> list[str]:
    """Each `make TARGET` a doc names that the Makefile lacks, and each `results/NAME.json` that is not there:
    the docs point at the figures instead of retelling them, so a pointer must lead somewhere."""
    targets = set(re.findall(r"^([A-Za-z0-9_.-]+):", makefile.read_text(), flags=re.MULTILINE))
    problems = []
    for doc in docs:
        text = doc.read_text()
        for target in sorted(set(re.findall(r"`make ([A-Za-z0-9_.-]+)", text)) - targets):
            problems.append(f"{shown(doc)}: names `make {target}`, which {shown(makefile)} does not define")
        for name in sorted(set(re.findall(r"results/([A-Za-z0-9_.-]+\.json)", text))):
            if not (results / name).is_file():
                problems.append(f"{shown(doc)}: names results/{name}, which does not exist")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the table in the README")
    mode.add_argument("--check", action="store_true", help="exit 1 if the README's table is out of date")
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder of result JSONs")
    parser.add_argument("--readme", type=Path, default=README, help="Markdown file holding the table")
    parser.add_argument("--docs", type=Path, nargs="*", default=DOCS, help="Markdown files --check reads for pointers")
    parser.add_argument("--makefile", type=Path, default=MAKEFILE, help="the Makefile whose targets docs name")
    parser.add_argument(
        "--root-readme", type=Path, default=ROOT / "README.md", help="the README holding the answer table"
    )
    args = parser.parse_args(argv)

    table = render_table(args.results)
    if not (args.write or args.check):
        print(table)
        return 0
    try:
        current = args.readme.read_text()
        updated = splice(current, table)
    except (OSError, ValueError) as err:
        print(f"{shown(args.readme)}: {getattr(err, 'strerror', None) or err}", file=sys.stderr)
        return 1
    root, answer = args.root_readme, None
    if root.is_file() and (args.results / "fidelity.json").is_file() and answer_table.START in root.read_text():
        table = answer_table.render(args.results)
        answer = (root.read_text(), splice(root.read_text(), table, answer_table.START, answer_table.END))
    if args.check:
        problems = stale_doc_references(args.docs, args.makefile, RESULTS)  # the docs point at the committed results
        if updated != current:
            problems.insert(
                0, f"{shown(args.readme)}: the benchmarks table is out of date; run python -m benchmarks.index --write"
            )
        if answer is not None and answer[0] != answer[1]:
            problems.insert(
                0, f"{shown(root)}: the answer table is out of date; run python -m benchmarks.index --write"
            )
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    args.readme.write_text(updated)
    if answer is not None:
        root.write_text(answer[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
