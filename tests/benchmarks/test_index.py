"""benchmarks/index.py: the committed benchmarks/README.md table is what the results JSONs give, and the
generator's rows, placeholders and drift check on a synthetic results folder."""

import json

import pytest

from helpers import ROOT, import_benchmark

README_TEXT = "# Benchmarks\n\nIntro.\n\n<!-- index:start -->\n<!-- index:end -->\n\nAfter the table.\n"


@pytest.fixture(scope="module")
def index():
    return import_benchmark("index")


@pytest.fixture
def entries():
    from benchmarks.entries import Entry, Figure

    figures = (
        Figure("tau", ("summary", "tau"), "{:+.2f}"),
        Figure("share", ("summary", "shares", 1), "{:.1%}"),
        Figure("ok", ("summary", "ok"), "{}"),
        Figure("none", ("summary", "none"), "{:.2f}"),
        Figure("gone", ("summary", "absent", "deeper"), "{:.2f}"),
    )
    return {"alpha.json": Entry(question="Is alpha | fast?", command="make alpha", figures=figures)}


@pytest.fixture
def results(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    alpha = {"machine": {"cpu": "Test CPU", "threads": 2, "torch": "9.9", "run_seconds": 1234.5}}
    alpha["summary"] = {"tau": 0.4567, "shares": [0.1, 0.25], "ok": True, "none": None}
    (folder / "alpha.json").write_text(json.dumps(alpha))
    (folder / "beta.json").write_text(json.dumps({"machine": {"cpu": "Other CPU", "threads": 1}, "value": 3}))
    return folder


ALPHA_ROW = (
    "| Is alpha \\| fast? | `make alpha` | [alpha.json](results/alpha.json) | Test CPU, 2 threads, torch 9.9 | "
    "21 min | tau +0.46; share 25.0%; ok yes; none n/a; gone missing |"
)
BETA_ROW = "|  |  | [beta.json](results/beta.json) | Other CPU, 1 thread | not recorded | no headline figures yet |"


def test_committed_readme_table_is_up_to_date(index, capsys):
    assert index.main(["--check"]) == 0, capsys.readouterr().err


def test_every_figure_of_a_committed_result_resolves(index):
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        entry = index.ENTRIES.get(path.name)
        data = json.loads(path.read_text())
        for figure in entry.figures if entry else ():
            index.lookup(data, figure.path)  # raises KeyError naming the absent key
        index.lookup(data, entry.machine if entry else ("machine",))


def body_rows(text: str) -> list[str]:
    """The table rows of `text`, each section's heading, header and separator left out."""
    header = tuple(import_benchmark("index").HEADER)
    return [line for line in text.splitlines() if line.startswith("| ") and line not in header]


def test_rows_missing_paths_and_unknown_files(index, entries, results):
    lines = index.render_table(results, entries).splitlines()
    assert lines[2:6] == [
        "### Experiments",
        "",
        *index.HEADER,
    ]
    assert body_rows("\n".join(lines)) == [ALPHA_ROW, BETA_ROW]
    assert lines[lines.index(BETA_ROW) - 4] == f"### {index.UNINDEXED}"  # no entry: the last section


def test_sections_come_in_order_and_an_empty_one_has_no_heading(index, entries, results):
    from benchmarks.entries import EXPERIMENTS, SPEED, Entry

    entries["beta.json"] = Entry(question="Beta?", command="make beta", figures=(), section=SPEED)
    text = index.render_table(results, entries)
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    assert headings == [f"### {SPEED}", f"### {EXPERIMENTS}"]
    assert [row.split(" | ")[2] for row in body_rows(text)] == ["[beta.json](results/beta.json)"] + [
        "[alpha.json](results/alpha.json)"
    ]
    with pytest.raises(ValueError, match="section"):
        Entry(question="?", command="make x", figures=(), section="Elsewhere")


def test_invalid_json_and_missing_machine_do_not_break_the_table(index, entries, results):
    (results / "broken.json").write_text("{not json")
    (results / "alpha.json").write_text(json.dumps({"summary": {"tau": 1}}))
    rows = body_rows(index.render_table(results, entries))
    assert rows[0].endswith(
        "| missing | not recorded | tau +1.00; share missing; ok missing; none missing; gone missing |"
    )
    assert rows[2] == "|  |  | [broken.json](results/broken.json) | missing | not recorded | not valid JSON |"


def test_write_then_check_and_check_fails_after_a_figure_changes(index, entries, results, monkeypatch, capsys):
    monkeypatch.setattr(index, "ENTRIES", entries)
    readme = results.parent / "README.md"
    readme.write_text(README_TEXT)
    paths = ["--results", str(results), "--readme", str(readme)]
    assert index.main(["--check", *paths]) == 1  # the empty table is out of date
    assert index.main(["--write", *paths]) == 0
    text = readme.read_text()
    assert text.startswith("# Benchmarks\n\nIntro.\n\n<!-- index:start -->\n") and text.endswith(
        "\n<!-- index:end -->\n\nAfter the table.\n"
    )
    assert ALPHA_ROW in text and BETA_ROW in text
    capsys.readouterr()
    assert index.main(["--check", *paths]) == 0

    alpha = json.loads((results / "alpha.json").read_text())
    alpha["summary"]["tau"] = 0.5
    (results / "alpha.json").write_text(json.dumps(alpha))
    assert index.main(["--check", *paths]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "README.md" in err and "out of date" in err
    assert readme.read_text() == text  # --check writes nothing


def test_no_flag_prints_the_table(index, entries, results, monkeypatch, capsys):
    monkeypatch.setattr(index, "ENTRIES", entries)
    assert index.main(["--results", str(results)]) == 0
    assert body_rows(capsys.readouterr().out) == [ALPHA_ROW, BETA_ROW]


def test_a_readme_without_markers_fails_with_its_name(index, results, tmp_path, capsys):
    readme = tmp_path / "NOTES.md"
    readme.write_text("# No table here\n")
    assert index.main(["--check", "--results", str(results), "--readme", str(readme)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NOTES.md" in err and "<!-- index:start -->" in err


def test_a_written_result_carries_its_run_time_and_the_table_shows_it(index, tmp_path):
    from benchmarks.harness import write_json

    write_json(tmp_path / "results" / "gamma.json", {"machine": {"cpu": "X"}, "value": 1})
    record = json.loads((tmp_path / "results" / "gamma.json").read_text())["machine"]
    assert isinstance(record["run_seconds"], float) and record["run_seconds"] >= 0  # since the harness was imported
    row = body_rows(index.render_table(tmp_path / "results", {}))[0]
    assert row.split(" | ")[4] == index.run_time_text(
        json.loads((tmp_path / "results" / "gamma.json").read_text()), None
    )
    assert index.run_time_text({"machine": {"run_seconds": 59.6}}, None) == "60 s"
    assert index.run_time_text({"machine": {"run_seconds": 3600}}, None) == "60 min"


def test_check_fails_on_a_doc_pointing_at_a_missing_target_or_result(index, results, tmp_path):
    (tmp_path / "Makefile").write_text("alpha: x\n\tpython -m alpha\nbeta:\n")
    doc = tmp_path / "doc.md"
    doc.write_text("Run `make alpha`, then `make gamma`; see results/alpha.json and results/zeta.json.")
    problems = index.stale_doc_references([doc], tmp_path / "Makefile", results)
    assert len(problems) == 2
    assert "`make gamma`" in problems[0] and "results/zeta.json" in problems[1]
    assert index.stale_doc_references(index.DOCS, index.MAKEFILE, index.RESULTS) == []  # the real docs


def test_the_readmes_answer_table_is_read_from_the_fidelity_results_and_checked(index, tmp_path, capsys):
    """The root README's table of how far to trust the answer holds the headline of results/fidelity.json, and
    --check fails, naming the file, once a figure there changes."""
    committed = json.loads((ROOT / "benchmarks" / "results" / "fidelity.json").read_text())
    results = tmp_path / "results"
    results.mkdir()
    (results / "fidelity.json").write_text(json.dumps(committed))
    readme, root = tmp_path / "bench.md", tmp_path / "README.md"
    readme.write_text(README_TEXT)
    root.write_text("# resnas\n\n<!-- answer:start -->\n<!-- answer:end -->\n")
    args = ["--results", str(results), "--readme", str(readme), "--root-readme", str(root), "--docs"]
    assert index.main(["--write", *args]) == 0
    table = root.read_text()
    first = next(iter(committed["summary"]["headline"].values()))
    assert f"| answer tau (table order / mean of 5 orders) | {first['kendall_tau']:.2f} / " in table
    assert index.main(["--check", *args]) == 0, capsys.readouterr().err
    first["kendall_tau"] = -0.99
    (results / "fidelity.json").write_text(json.dumps(committed))
    assert index.main(["--check", *args]) == 1
    assert "README.md: the answer table is out of date" in capsys.readouterr().err
