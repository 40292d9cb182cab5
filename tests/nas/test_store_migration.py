"""A store written by schema version 1 opens and is upgraded, on SQLite and PostgreSQL.

`data/store_v1.<dialect>.sql` is the DDL that version 1's ORM emitted (compiled from the code at
schema version 1, unchanged since), and `data/store_v1.rows.sql` rows as that code wrote them: a
retry and an interrupted trial both `failed`, told apart only by text markers in failure_reason.
"""

import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

from nas.search.launch import finished_trial_numbers
from nas.space.objectives import kv_bytes_of
from nas.store import SCHEMA_VERSION, Store, StoreError, default_url
from search_spaces.residual_lm import ArchConfig
from search_spaces.residual_lm.decode_cost import kv_cache_bytes
from workers.status import TrialStatus
from workers.training.records import RungRecord
from workers.trial.result import TrialResult

DATA = Path(__file__).resolve().parents[1] / "data"


def statements(path: Path) -> list[str]:
    lines = [line for line in path.read_text().splitlines() if not line.startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";\n") if s.strip()]


def write_v1_store(url: str) -> None:
    dialect = make_url(url).get_backend_name()
    engine = create_engine(url)
    try:
        with engine.begin() as db:
            for sql in statements(DATA / f"store_v1.{dialect}.sql") + statements(DATA / "store_v1.rows.sql"):
                db.execute(text(sql.rstrip(";")))
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def v1_url(request, tmp_path):
    url = default_url(tmp_path) if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    write_v1_store(url)
    return url


def test_a_version_1_store_is_upgraded_on_open(v1_url):
    with Store(v1_url) as store:
        assert store.schema_version() == SCHEMA_VERSION == 5
        rows = {r.number: r for r in store.trials("old")}
        assert [rows[n].status for n in range(4)] == [
            TrialStatus.COMPLETED,
            TrialStatus.RETRYING,
            TrialStatus.INTERRUPTED,
            TrialStatus.FAILED,
        ]
        # Nothing else changed: results, the earlier attempt's record, and the completed trial's children.
        assert (rows[0].val_loss, rows[0].tokens_seen, rows[0].executed_flops_per_token) == (2.5, 110000, 1.5e6)
        assert rows[3].previous_attempts[0]["attempt"] == 0 and rows[3].failure_reason.startswith("out of memory")
        assert [p.step for p in store.curve(rows[0].id)] == [27, 54]
        assert store.diagnostics(rows[0].id) == {"residual_rms": [1.0, 1.2]}
        assert store.width(rows[0].id).d_align == 2.0
        assert store.rungs("old") == [] and rows[0].branch_flops is None  # version 3: the ladder's table and column
        assert store.record_rung("old", 0, RungRecord(0, 0, 5e11, 54, 110000, 2.5, 5e11, 9.0))
        replica = dict(d_model=24, params=5000, tokens_per_param=20.5, target_tokens_per_param=21.0, on_path=False)
        assert store.record_rung("old", 0, RungRecord(1, 0, 1e12, 9, 1, 2.4, 1e12, 3.0, **replica))
        lower, upper = store.rungs("old")  # version 4: a replica rung's columns (None on a budget-ladder rung)
        assert (lower.d_model, lower.on_path, upper.d_model, upper.tokens_per_param, upper.on_path) == (
            None,
            None,
            24,
            20.5,
            False,
        )
        # version 5: no stored inference costs; readers count them from the stored architecture.
        arch = ArchConfig(residual="nag", n_layers=2)
        assert rows[0].kv_bytes_per_token is None and rows[0].decode_flops_per_token is None
        assert kv_bytes_of(rows[0]) == kv_cache_bytes(arch, arch.seq_len) / arch.seq_len
        # Only final trials count towards the search: the retry and the interrupted one do not.
        assert finished_trial_numbers(store, "old") == {0, 3}
        summary = store.list_searches()[0]
        assert (summary.completed, summary.failed, summary.running, summary.interrupted) == (1, 1, 1, 1)
        # The new statuses are writable, and the retry can go on as the next attempt of the same row.
        assert store.start_trial("old", number=1, attempt=1, config={"arch": {}}) == rows[1].id
        assert store.trial(rows[1].id).previous_attempts[0]["status"] == TrialStatus.FAILED
        died = TrialResult.untrained(TrialStatus.RETRYING, "died again", 1.5e6, time.perf_counter())
        store.finish_trial(rows[1].id, died)
    with Store(v1_url) as again:  # reopening is a no-op
        assert again.schema_version() == SCHEMA_VERSION
        assert again.trial(rows[1].id).status == TrialStatus.RETRYING


def test_the_upgraded_trials_table_keeps_its_constraints(v1_url):
    with Store(v1_url):
        pass
    engine = create_engine(v1_url)
    try:
        with engine.connect() as db:
            if engine.dialect.name == "sqlite":
                db.exec_driver_sql("PRAGMA foreign_keys = ON")  # pysqlite emits no BEGIN for a pragma
                db.commit()
            with pytest.raises(Exception, match="(?i)check"):  # an unknown status is still refused
                with db.begin():
                    db.execute(text("UPDATE resnas_trials SET status = 'lost' WHERE id = 1"))
            with pytest.raises(Exception, match="(?i)unique"):
                with db.begin():
                    db.execute(text("UPDATE resnas_trials SET number = 1 WHERE id = 1"))
            with db.begin():  # the children still reference the rebuilt table: deleting a trial cascades
                db.execute(text("DELETE FROM resnas_trials WHERE id = 1"))
            for child in ("resnas_trial_curve_points", "resnas_trial_diagnostics", "resnas_width_certificates"):
                assert db.execute(text(f"SELECT count(*) FROM {child}")).scalar() == 0
            db.commit()
            with pytest.raises(Exception, match="(?i)foreign key"):
                with db.begin():
                    db.execute(text("INSERT INTO resnas_trial_diagnostics (trial_id, diagnostics) VALUES (99, '{}')"))
    finally:
        engine.dispose()


def test_a_newer_store_is_refused_and_left_as_it_is(tmp_path):
    url = default_url(tmp_path)
    Store(url).close()
    engine = create_engine(url)
    with engine.begin() as db:
        db.execute(text("UPDATE resnas_schema_version SET version = :v"), {"v": SCHEMA_VERSION + 1})
    with pytest.raises(StoreError, match=f"version {SCHEMA_VERSION + 1}, newer than this code"):
        Store(url)
    with engine.connect() as db:
        assert db.execute(text("SELECT version FROM resnas_schema_version")).scalar() == SCHEMA_VERSION + 1
    engine.dispose()


@pytest.mark.parametrize("command", [["list"], ["show", "any"], ["status"]])
def test_an_older_nas_refuses_a_newer_store_in_one_line_naming_both_versions(tmp_path, command):
    from typer.testing import CliRunner

    from nas.cli import app

    url = default_url(tmp_path)
    Store(url).close()
    engine = create_engine(url)
    with engine.begin() as db:
        db.execute(text("UPDATE resnas_schema_version SET version = :v"), {"v": SCHEMA_VERSION + 1})
    engine.dispose()
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    done = CliRunner().invoke(app, [*command, "--storage", url])
    assert done.exit_code == 2
    lines = done.output.strip().splitlines()
    assert len(lines) == 1 and f"version {SCHEMA_VERSION + 1}" in lines[0] and f"version {SCHEMA_VERSION})" in lines[0]
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files  # nothing written
