"""The reading commands (`show`, `list`, `status`, `effects`, `export`, `dashboard`) open an existing store
read-only: a missing one is one `error:` line naming its URL, exit code 2, and no file is created; a store
without resnas's tables, or at an older schema version, is refused and left as it is. `nas search` creates the
store; `nas resume` needs one that exists.

The CLI runs in-process through typer's `CliRunner`, in an empty working directory (the default store is
`resnas.db` there).
"""

import os

import pytest
from sqlalchemy import create_engine, inspect, text
from typer.testing import CliRunner, Result

from nas.cli import app
from nas.store import SCHEMA_VERSION, Store, StoreError, default_url

RUNNER = CliRunner()
READS = {
    "show": ["show", "nosuch", "--json"],
    "list": ["list"],
    "status": ["status"],
    "status NAME": ["status", "nosuch"],
    "effects": ["effects", "nosuch"],
    "export": ["export", "nosuch", "--pareto", "--out", "exported"],
    "dashboard": ["dashboard"],
}


@pytest.fixture
def nas(tmp_path, monkeypatch):
    """`nas(*args)` runs the CLI in-process in the empty folder tmp_path, with no store URL in the environment;
    `nas dashboard` never replaces this process."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RESNAS_STORAGE", raising=False)

    def no_execve(*args):
        raise AssertionError("nas dashboard started Streamlit")

    monkeypatch.setattr(os, "execve", no_execve)
    return lambda *args: RUNNER.invoke(app, list(args), catch_exceptions=False)


def one_error_line(done: Result) -> str:
    """The single `error: ` line on stderr (fails the test otherwise)."""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


@pytest.mark.parametrize("command", READS.values(), ids=READS.keys())
def test_a_missing_store_is_one_line_naming_the_url_and_nothing_is_created(command, tmp_path, nas):
    done = nas(*command)
    assert done.exit_code == 2, done.stderr
    assert default_url(tmp_path) in one_error_line(done)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [READS["list"], READS["show"]], ids=["list", "show"])
def test_a_missing_store_given_by_storage_is_named_and_not_created(command, tmp_path, nas):
    url = f"sqlite:///{tmp_path / 'sub' / 'given.db'}"
    (tmp_path / "sub").mkdir()
    done = nas(*command, "--storage", url)
    assert done.exit_code == 2 and url in one_error_line(done), done.stderr
    assert list((tmp_path / "sub").iterdir()) == []


def files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize("command", READS.values(), ids=READS.keys())
def test_a_file_without_resnas_tables_is_refused_and_left_as_it_is(command, tmp_path, nas):
    (tmp_path / "resnas.db").write_bytes(b"")
    done = nas(*command)
    assert done.exit_code == 2, done.stderr
    assert default_url(tmp_path) in one_error_line(done) and "no resnas tables" in done.stderr
    assert files(tmp_path) == {"resnas.db": b""}


@pytest.mark.parametrize("command", [READS["list"], READS["show"]], ids=["list", "show"])
def test_an_older_schema_is_not_migrated_by_a_read(command, tmp_path, nas):
    url = default_url(tmp_path)
    Store(url).close()
    engine = create_engine(url)
    with engine.begin() as db:
        db.execute(text("UPDATE resnas_schema_version SET version = :v"), {"v": SCHEMA_VERSION - 1})
    engine.dispose()
    before = files(tmp_path)
    done = nas(*command)
    assert done.exit_code == 2, done.stderr
    assert f"version {SCHEMA_VERSION - 1}, older than this code" in one_error_line(done)
    assert files(tmp_path) == before


def test_reads_of_an_existing_store_work_and_write_nothing(tmp_path, nas):
    url = default_url(tmp_path)
    Store(url).close()
    before = (tmp_path / "resnas.db").read_bytes()
    assert nas("list").exit_code == 0
    done = nas("show", "nosuch", "--json")
    assert done.exit_code == 2 and "no search named 'nosuch'" in one_error_line(done)
    assert (tmp_path / "resnas.db").read_bytes() == before


def test_a_read_only_store_refuses_writes(tmp_path):
    url = default_url(tmp_path)
    Store(url).close()
    with Store(url, read_only=True) as store, pytest.raises(StoreError, match="is open read-only"):
        store.set_search_status("any", "completed")


def test_resume_of_a_missing_store_creates_none(tmp_path, nas):
    done = nas("resume", "nosuch")
    assert done.exit_code == 2 and "no such file" in one_error_line(done)
    assert not (tmp_path / "resnas.db").exists()


def test_a_read_creates_no_tables_in_an_empty_postgresql_database(postgres_url, nas):
    done = nas("list", "--storage", postgres_url)
    assert done.exit_code == 2, done.stderr
    line = one_error_line(done)  # the URL named with its password hidden
    assert "no resnas tables" in line and ":***@" + postgres_url.split("@")[1] in line
    engine = create_engine(postgres_url)
    try:
        assert inspect(engine).get_table_names() == []
    finally:
        engine.dispose()
