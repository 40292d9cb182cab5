"""The SQL store on a real SQLite file and a real PostgreSQL database: schema versions and locks, round
trips, rollback, concurrent writers, connections. SQLite-only: WAL and its file; PostgreSQL-only: the
advisory lock, connection hygiene (fork, dropped stores)."""

import fcntl
import math
import multiprocessing as mp
import os
import sqlite3
import time
import traceback
from dataclasses import fields, replace
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, make_url, text
from sqlalchemy.pool import NullPool

from nas.search.study import optuna_storage
from nas.store import (
    SCHEMA_LOCK_KEY,
    SCHEMA_VERSION,
    CurvePointRow,
    SearchExists,
    Store,
    StoreError,
    UnknownSearch,
    UnknownTrial,
    default_url,
    ensure_schema,
)
from nas.store.schema import (
    ARCH_FIELDS,
    COST_FIELDS,
    CURVE_FIELDS,
    RESULT_FLOAT_FIELDS,
    RESULT_INT_FIELDS,
    RUNG_FIELDS,
    WIDTH_FIELDS,
    CurvePointModel,
    RungModel,
    TrialModel,
    WidthCertificateModel,
)
from search_spaces.residual_lm import ArchConfig
from workers.status import TrialStatus
from workers.training.config import OptimConfig
from workers.training.records import CurvePoint, RungRecord
from workers.trial.contract import CountedCosts
from workers.trial.result import TrialResult, WidthCertificate

NAN, INF = math.nan, math.inf
ARCH = dict(
    vocab_size=256,
    seq_len=128,
    n_layers=6,
    d_model=192,
    n_heads=6,
    mlp_ratio=8 / 3,
    residual="nag",
    ancre_tau=0.01,
    mod_rate=0.25,
    mod_every=2,
    mod_routing="causal_threshold",
    nag_gate_components=32,
    tie_embeddings=False,
)
OPTIM = dict(lr=3e-3, weight_decay=0.1, warmup=0.2, grad_clip=1.0)


def rungs(seed: int = 7) -> list[RungRecord]:
    """What `workers.training.train` reports for a 3-rung ladder whose top rung is this trial's budget."""
    return [
        RungRecord(
            rung=r,
            seed=seed,
            budget_flops=4e12 / 3 ** (2 - r),
            steps=11 * 3**r - r // 2,
            tokens=(11 * 3**r - r // 2) * 4096,
            val_loss=2.6 - 0.3 * r,
            training_flops=4e12 / 3 ** (2 - r) * 0.99,
            train_seconds=7.0 * 3**r,
        )
        for r in range(3)
    ]


RUNGS = rungs()


def completed_result(loss: float = 1.83, seed: int = 7) -> TrialResult:
    """A completed NAG trial's result, with every field filled in."""
    curve = [
        CurvePoint(s, s * 4096, 5.5 - 0.03 * s, s * 4.1e10, 3e-3, 98, 5.4 - 0.03 * s if s % 40 == 0 else None)
        for s in range(10, 99, 10)
    ]
    curve.append(CurvePoint(98, 98 * 4096, 2.6, 98 * 4.1e10, 3e-4, 98, loss, 4, 4))
    return TrialResult(
        status=TrialStatus.COMPLETED,
        failure_reason=None,
        val_loss=loss,
        val_bpb=loss / math.log(2),
        nominal_flops_per_token=4.4e6,
        executed_flops_per_token=3.6e6,
        realised_flops_per_token=3.61e6,
        budget_flops=4e12,
        training_flops=98 * 4.1e10,
        tokens_seen=98 * 4096,
        planned_tokens=98 * 4096,
        steps=98,
        wall_time_s=61.25,
        tokens_per_s=6553.6,
        step_time_share=0.93,
        peak_memory_mb=812.5,
        branch_flops=2.2e11,
        rungs=rungs(seed),
        diagnostics={
            "residual_rms": [1.0, 1.41, NAN, 2.2],
            "skip_rate": {"attn2": 0.25, "mlp2": 0.24},
            "mod_threshold": {"attn2": 0.1, "mlp2": -INF},
            "executed_flops_per_token": 3.6e6,
            "nag_angle": [None, 0.31, INF],
            "nag_gate": [0.5, 0.52],
            "nag_alpha": [1.0, 0.9],
            "ancre_p": [[0.5, 0.5], [0.1, NAN]],
        },
        width=WidthCertificate(
            n_sequences=64,
            d_model=192,
            mu_norm=0.12,
            d_par=3.4,
            d_2=17.0,
            d_align=5.1,
            b_exact_8_8=0.021,
            b_align_8_8=0.034,
            p_hat_8_8=0.025,
        ),
        curve=curve,
        arch=ArchConfig(**ARCH),
        optim=OptimConfig(**OPTIM),
        seed=seed,
    )


def failed_result(status: str = "failed") -> TrialResult:
    """How `run_trial` reports a crash: inf loss, no curve, diagnostics or width."""
    return TrialResult(
        status=TrialStatus(status),
        failure_reason="RuntimeError: CUDA error: out of memory",
        val_loss=INF,
        val_bpb=INF,
        nominal_flops_per_token=4.4e6,
        executed_flops_per_token=3.6e6,
        realised_flops_per_token=None,
        budget_flops=4e12,
        training_flops=0.0,
        tokens_seen=0,
        planned_tokens=0,
        steps=0,
        wall_time_s=0.4,
        tokens_per_s=0.0,
        step_time_share=None,
        peak_memory_mb=300.0,
        branch_flops=0.0,
        arch=ArchConfig(**ARCH),
        optim=OptimConfig(**OPTIM),
        seed=3,
    )


def new_search(store: Store, name: str = "s1", requested_trials: int = 8):
    return store.create_search(
        name,
        requested_trials=requested_trials,
        budget={"trial_flops": 4e12, "search_flops": 4e14, "wall_s": INF},
        space={"residual": ["cascaded", "nag", "ancre"], "n_layers": [2, 12]},
        settings={"sampler": "tpe", "seed": 0, "workers": 2, "retries": 1},
        optuna_study_name=f"{name}-study",
        code_version="abc123",
    )


@pytest.fixture
def url(tmp_path):
    return default_url(tmp_path)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """A fresh store database on each backend: a SQLite file, a PostgreSQL database."""
    return default_url(tmp_path) if request.param == "sqlite" else request.getfixturevalue("postgres_url")


@pytest.fixture
def store(store_url):
    with Store(store_url) as s:
        yield s


def test_the_column_lists_are_the_records_fields_and_every_one_has_its_column():
    """What the store writes is read off the typed records (`TrialResult`, `RungRecord`, `CountedCosts`,
    `WidthCertificate`, `CurvePoint`): every scalar field has a column, and every other field is a child table or
    a document."""
    columns = {model: {c.name for c in inspect(model).columns} for model in (TrialModel, RungModel, CurvePointModel)}
    documents = {"status", "failure_reason", "diagnostics", "width", "curve", "rungs", "arch", "optim"}
    assert {f.name for f in fields(TrialResult)} == set(RESULT_FLOAT_FIELDS + RESULT_INT_FIELDS) | documents
    assert set(RESULT_FLOAT_FIELDS + RESULT_INT_FIELDS + COST_FIELDS + ARCH_FIELDS) <= columns[TrialModel]
    assert COST_FIELDS == tuple(f.name for f in fields(CountedCosts))
    assert {"rung", "seed", *RUNG_FIELDS} <= columns[RungModel]
    assert {"rung", "seed", *RUNG_FIELDS} == {f.name for f in fields(RungRecord)}
    assert set(CURVE_FIELDS) <= columns[CurvePointModel] and set(CURVE_FIELDS) <= {f.name for f in fields(CurvePoint)}
    assert WIDTH_FIELDS == tuple(f.name for f in fields(WidthCertificate))
    assert set(WIDTH_FIELDS) <= {c.name for c in inspect(WidthCertificateModel).columns}


def test_schema_is_created_once_and_versioned(store_url):
    with Store(store_url) as first:
        assert first.schema_version() == SCHEMA_VERSION == 5
        new_search(first)
    with Store(store_url) as again:  # reopening keeps the data and the version
        assert again.schema_version() == SCHEMA_VERSION and again.get_search("s1").name == "s1"
    plain = create_engine(store_url)  # without the Store's hooks
    try:
        assert ensure_schema(plain) == ensure_schema(plain) == SCHEMA_VERSION
        with plain.connect() as db:
            assert db.execute(text("SELECT id, version FROM resnas_schema_version")).all() == [(1, SCHEMA_VERSION)]
    finally:
        plain.dispose()


def test_sqlite_store_is_in_wal_mode_and_plain_engines_take_the_write_lock(url, tmp_path):
    assert url == f"sqlite:///{tmp_path}/resnas.db"
    Store(url).close()
    plain = create_engine(f"sqlite:///{tmp_path}/plain.db")  # legacy pysqlite begins nothing: takes the lock itself
    assert ensure_schema(plain) == ensure_schema(plain) == SCHEMA_VERSION
    plain.dispose()
    with sqlite3.connect(tmp_path / "plain.db") as db:
        assert db.execute("SELECT version FROM resnas_schema_version").fetchall() == [(SCHEMA_VERSION,)]
    with sqlite3.connect(tmp_path / "resnas.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_newer_schema_is_refused(store_url):
    Store(store_url).close()
    engine = create_engine(store_url, poolclass=NullPool)
    with engine.begin() as db:
        db.execute(text("UPDATE resnas_schema_version SET version = 99"))
    engine.dispose()
    with pytest.raises(StoreError, match="version 99, newer than this code") as err:
        Store(store_url)
    assert "\n" not in str(err.value)


def test_unreachable_urls_raise_one_line_store_errors():
    with pytest.raises(StoreError, match=r"sqlite:////nonexistent-dir/x\.db") as err:
        Store("sqlite:////nonexistent-dir/x.db")
    assert "\n" not in str(err.value)
    with pytest.raises(StoreError, match="OperationalError") as err:  # no server on port 1: password hidden
        Store("postgresql+psycopg://nas:s3cret@127.0.0.1:1/resnas")
    assert "s3cret" not in str(err.value) and "nas:***@127.0.0.1" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(StoreError):
        Store("not a url")


def test_the_url_connects_and_the_display_url_hides_the_password(postgres_url):
    with Store(postgres_url) as store:
        assert store.url == postgres_url  # Optuna's storage connects with it
        password = make_url(postgres_url).password
        assert password not in store.display_url + repr(store) and ":***@127.0.0.1" in store.display_url
        optuna_storage(store.url).engine.dispose()


def test_round_trip_of_a_completed_and_a_failed_trial(store):
    row = new_search(store)
    assert row.budget == {"trial_flops": 4e12, "search_flops": 4e14, "wall_s": None}  # inf is not JSON
    assert store.get_search("s1") == row and row.status == "running" and row.created_at.tzinfo is not None
    config = {"arch": ArchConfig(**ARCH).model_dump(), "optim": OptimConfig(**OPTIM).model_dump()}
    good = store.start_trial("s1", number=0, attempt=0, config=config, optuna_trial_number=0)
    bad = store.start_trial("s1", number=1, attempt=0, config=config, optuna_trial_number=1)
    assert [t.status for t in store.trials("s1")] == ["running", "running"]
    assert store.trial(good).val_loss is None and store.trial(good).residual == "nag"

    result = completed_result()
    store.finish_trial(good, result)
    store.finish_trial(bad, failed_result())

    done = store.trial(good)
    assert (done.status, done.failure_reason, done.attempt, done.optuna_trial_number) == ("completed", None, 0, 0)
    assert {name: getattr(done, name) for name in RESULT_FLOAT_FIELDS + RESULT_INT_FIELDS} == {
        name: getattr(result, name) for name in RESULT_FLOAT_FIELDS + RESULT_INT_FIELDS
    }
    assert {name: getattr(done, name) for name in ARCH_FIELDS} == {name: ARCH[name] for name in ARCH_FIELDS}
    assert done.config == config and done.finished_at >= done.started_at
    stored_curve = [CurvePointRow(*(getattr(p, k) for k in CURVE_FIELDS)) for p in result.curve]  # lr etc. dropped
    assert store.curve(good) == stored_curve
    assert store.diagnostics(good) == {
        "residual_rms": [1.0, 1.41, None, 2.2],
        "skip_rate": {"attn2": 0.25, "mlp2": 0.24},
        "mod_threshold": {"attn2": 0.1, "mlp2": None},
        "executed_flops_per_token": 3.6e6,
        "nag_angle": [None, 0.31, None],
        "nag_gate": [0.5, 0.52],
        "nag_alpha": [1.0, 0.9],
        "ancre_p": [[0.5, 0.5], [0.1, None]],
    }
    assert result.width is not None and store.width(good) == result.width
    stored_rungs = [RungRecord(**{f.name: getattr(r, f.name) for f in fields(RungRecord)}) for r in store.rungs("s1")]
    assert stored_rungs == RUNGS and {(r.number, r.seed, r.residual) for r in store.rungs("s1")} == {(0, 7, "nag")}

    failed = store.trial(bad)
    assert failed.status == "failed" and failed.failure_reason.startswith("RuntimeError")
    assert failed.val_loss == INF and failed.val_bpb == INF  # inf survives float columns
    assert failed.realised_flops_per_token is None and failed.step_time_share is None and failed.tokens_seen == 0
    assert store.curve(bad) == [] and store.diagnostics(bad) is None and store.width(bad) is None
    assert [t.number for t in store.trials("s1", statuses=["failed"])] == [1]


def test_json_documents_come_back_exactly_as_written(store):
    """Key order and int-versus-float survive (PostgreSQL's JSONB would sort keys and turn 1e16 into an int)."""
    settings = {
        "zeta": 1e20,
        "a": 3,
        "attn10": 1.0,
        "mlp2": 0.5,
        "big": 1e16,
        "tiny": 3e-10,
        "two": 2.0,
        "nested": {"b": [1, 2.5, None, -0.0], "a": True},
        "text": "caf\u00e9 \u2713",
        "empty": {},
    }
    store.create_search(
        "j", requested_trials=1, budget={}, space={}, settings=settings, optuna_study_name=None, code_version=None
    )
    got = store.get_search("j").settings
    assert got == settings and list(got) == list(settings) and list(got["nested"]) == ["b", "a"]
    assert [type(v) for v in got.values()] == [type(v) for v in settings.values()]
    assert [type(v) for v in got["nested"]["b"]] == [int, float, type(None), float]


def test_names_are_unique_and_unknown_names_are_named(store):
    new_search(store)
    with pytest.raises(SearchExists, match="'s1'"):
        new_search(store)
    for call in (
        lambda: store.get_search("nope"),
        lambda: store.trials("nope"),
        lambda: store.set_search_status("nope", "completed"),
        lambda: store.start_trial("nope", number=0, config={}),
    ):
        with pytest.raises(UnknownSearch, match="no search named 'nope'"):
            call()
    with pytest.raises(ValueError, match="search status"):
        store.set_search_status("s1", "paused")
    store.set_search_status("s1", "interrupted")
    store.set_requested_trials("s1", 20)
    assert (store.get_search("s1").status, store.get_search("s1").requested_trials) == ("interrupted", 20)


def test_failing_writes_roll_back_completely(store):
    new_search(store)
    tid = store.start_trial("s1", number=0, config={"arch": ARCH})
    with pytest.raises(UnknownTrial, match="no trial with id 999"):
        store.finish_trial(999, completed_result())
    broken = completed_result()
    broken.width = replace(broken.width, n_sequences=None)  # a NOT NULL column
    with pytest.raises(StoreError, match="IntegrityError") as err:  # fails after the trial and curve were written
        store.finish_trial(tid, broken)
    assert "\n" not in str(err.value)
    trial = store.trial(tid)
    assert trial.status == "running" and trial.val_loss is None and trial.finished_at is None
    assert store.curve(tid) == [] and store.diagnostics(tid) is None and store.width(tid) is None
    with pytest.raises(StoreError, match="trial 0 of search 's1' already exists"):
        store.start_trial("s1", number=0, attempt=0, config={})
    assert store.count_trials("s1") == 1
    with pytest.raises(ValueError, match="status"):
        store.finish_trial(tid, replace(completed_result(), status=TrialStatus.RUNNING))


def test_a_retry_reuses_the_number_and_keeps_the_earlier_outcome(store):
    new_search(store)
    tid = store.start_trial("s1", number=0, config={"arch": ARCH})
    store.finish_trial(tid, failed_result("retrying"))  # its process died; Tune starts attempt 1
    assert store.trial(tid).status == "retrying"
    assert store.start_trial("s1", number=0, attempt=1, config={"arch": ARCH}) == tid
    retried = store.trial(tid)
    assert (retried.status, retried.attempt, retried.val_loss, retried.failure_reason) == ("running", 1, None, None)
    assert retried.previous_attempts == [
        {"attempt": 0, "status": "failed", "failure_reason": "RuntimeError: CUDA error: out of memory"}
    ]
    store.finish_trial(tid, completed_result())
    with pytest.raises(StoreError, match="already exists"):  # a completed trial is never overwritten by a retry
        store.start_trial("s1", number=0, attempt=2, config={})


def test_mark_running_trials_interrupted_and_search_summaries(store):
    new_search(store, "a")
    new_search(store, "b", requested_trials=3)
    outcomes = [
        completed_result(2.1),
        completed_result(1.7),
        failed_result(),
        failed_result("diverged"),
        failed_result("infeasible"),
        failed_result("retrying"),
        None,
        None,
    ]
    for number, result in enumerate(outcomes):
        tid = store.start_trial("a", number=number, config={"arch": ARCH})
        if result:
            store.finish_trial(tid, result)
    store.start_trial("b", number=0, config={"arch": ARCH})
    summaries = {s.name: s for s in store.list_searches()}
    assert (summaries["a"].running, summaries["a"].failed) == (3, 1)  # a retrying trial is about to run again

    assert store.mark_running_trials("a", TrialStatus.INTERRUPTED, "driver died") == 3  # running and retrying
    assert store.count_trials("a", ["failed"]) == 1 and store.count_trials("a", ["running", "retrying"]) == 0
    assert [t.failure_reason for t in store.trials("a", ["interrupted"])] == ["driver died"] * 3
    assert all(t.status is TrialStatus.INTERRUPTED for t in store.trials("a", ["interrupted"]))
    assert store.count_trials("b", ["running"]) == 1  # other searches untouched
    with pytest.raises(ValueError, match="status must be one of"):
        store.mark_running_trials("a", "running", "not a finished status")

    summaries = {s.name: s for s in store.list_searches()}
    a, b = summaries["a"], summaries["b"]
    assert (a.completed, a.failed, a.running, a.other, a.interrupted, a.best_val_loss) == (2, 1, 0, 2, 3, 1.7)
    assert (b.completed, b.failed, b.running, b.other, b.best_val_loss, b.requested_trials) == (0, 0, 1, 0, None, 3)
    assert [s.name for s in store.list_searches()] == ["a", "b"]


def _writer(url: str, name: str, n_trials: int, start, errors) -> None:
    """One search's driver: race the others to open a fresh store, then write `n_trials` finished trials."""
    try:
        start.wait(timeout=60)
        with Store(url) as store:
            new_search(store, name, requested_trials=n_trials)
            for number in range(n_trials):
                tid = store.start_trial(name, number=number, config={"arch": ARCH, "optim": OPTIM})
                store.finish_trial(tid, completed_result(2.0 + number / 100, seed=number))
            store.set_search_status(name, "completed")
    except BaseException:
        errors.put(f"{name}: {traceback.format_exc()}")


def run_at_once(n_procs: int, target, args_of) -> None:
    """Run target(*args_of(i), start, errors) in n fresh (spawned) processes released by one barrier;
    fail with every child's traceback if any reported an error or exited non-zero."""
    ctx = mp.get_context("spawn")
    start, errors = ctx.Barrier(n_procs), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args_of(i), start, errors)) for i in range(n_procs)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    problems = []
    while not errors.empty():
        problems.append(errors.get())
    assert not problems, "\n".join(problems)
    assert [p.exitcode for p in procs] == [0] * n_procs


@pytest.mark.slow
def test_concurrent_writers_on_a_fresh_store(store_url):
    """Four processes create the schema at once (SQLite: write lock; PostgreSQL: advisory lock), then write."""
    n_procs, n_trials = 4, 40
    run_at_once(n_procs, _writer, lambda i: (store_url, f"w{i}", n_trials))
    with Store(store_url) as store:
        assert store.schema_version() == SCHEMA_VERSION
        summaries = store.list_searches()
        assert sorted(s.name for s in summaries) == [f"w{i}" for i in range(n_procs)]
        assert all((s.status, s.completed, s.best_val_loss) == ("completed", n_trials, 2.0) for s in summaries)
        assert sum(store.count_trials(s.name, ["completed"]) for s in summaries) == n_procs * n_trials
        assert all(len(store.curve(t.id)) == 10 for t in store.trials("w0"))


def _open_schema(url: str, opener: str) -> None:
    """Create the store's tables (`Store`) or Optuna's (`optuna_storage`) on a fresh database."""
    if opener == "store":
        Store(url).close()
    else:
        optuna_storage(url).engine.dispose()


class SchemaLockHolder:
    """Holds the schema lock another process would take, and sees that process wait for it.

    PostgreSQL: the advisory lock, which is per database (a bigint key shows in pg_locks as classid =
    high, objid = low word). SQLite: the flock on the database's directory (a blocked flock shows in /proc/locks as
    `-> FLOCK ... PID MAJ:MIN:INODE`).
    """

    def __init__(self, url: str):
        self.url, self.postgres = url, url.startswith("postgresql")
        self.engine = create_engine(url, poolclass=NullPool)

    def __enter__(self):
        if self.postgres:
            self.db = self.engine.connect()
            self.db.execute(text("SELECT pg_advisory_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
            self.db.commit()
        else:
            self.directory = Path(make_url(self.url).database).parent
            self.fd = os.open(self.directory, os.O_RDONLY)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.postgres:
            self.db.close()  # ends the session: releases the lock
        else:
            os.close(self.fd)
        self.engine.dispose()

    def waited_on_by(self, pid: int) -> bool:
        if self.postgres:
            self.db.commit()
            return bool(
                self.db.execute(
                    text(  # pg_locks knows server PIDs only: any waiter on this database's lock
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                        "AND classid = :high AND objid = :low "
                        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                    ),
                    {"high": SCHEMA_LOCK_KEY >> 32, "low": SCHEMA_LOCK_KEY & 0xFFFFFFFF},
                ).scalar()
            )
        inode = os.stat(self.directory).st_ino
        for line in Path("/proc/locks").read_text().splitlines():
            fields_ = line.split()
            if "->" in fields_ and "FLOCK" in fields_:
                at = fields_.index("->")
                if int(fields_[at + 4]) == pid and int(fields_[at + 5].rsplit(":", 1)[1]) == inode:
                    return True
        return False

    def has_table(self, table: str) -> bool:
        with self.engine.connect() as db:
            return inspect(db).has_table(table)


@pytest.mark.parametrize(
    "backend, opener, table",
    [
        ("postgresql", "store", "resnas_schema_version"),
        ("postgresql", "optuna", "studies"),
        ("sqlite", "optuna", "studies"),
    ],
)
@pytest.mark.slow
def test_schema_creation_waits_for_the_schema_lock(backend, opener, table, request, tmp_path):
    """While the test holds the schema lock, a process creating tables waits and creates nothing.

    (The store's own tables on SQLite are created under `BEGIN IMMEDIATE`: see the concurrent test.)
    """
    url = default_url(tmp_path) if backend == "sqlite" else request.getfixturevalue("postgres_url")
    if backend == "sqlite":
        Store(url).close()  # the file exists, without Optuna's tables
    proc = mp.get_context("spawn").Process(target=_open_schema, args=(url, opener))
    try:
        with SchemaLockHolder(url) as lock:
            proc.start()
            deadline = time.monotonic() + 120
            while not lock.waited_on_by(proc.pid) and proc.is_alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert lock.waited_on_by(proc.pid) and proc.is_alive(), "the process did not wait for the schema lock"
            assert not lock.has_table(table)
        proc.join(timeout=120)
        assert proc.exitcode == 0
        assert SchemaLockHolder(url).has_table(table)
    finally:
        if proc.is_alive():
            proc.kill()


def _open_optuna_storage(url: str, start, errors) -> None:
    try:
        start.wait(timeout=60)
        optuna_storage(url).engine.dispose()
    except BaseException:
        errors.put(traceback.format_exc())


@pytest.mark.slow
def test_concurrent_drivers_create_optunas_tables_once(store_url):
    """Four processes open Optuna's storage on a fresh database at once: none collides."""
    Store(store_url).close()
    run_at_once(4, _open_optuna_storage, lambda i: (store_url,))
    engine = create_engine(store_url, poolclass=NullPool)
    with engine.connect() as db:
        assert db.execute(text("SELECT count(*) FROM version_info")).scalar() == 1
        assert db.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1
    engine.dispose()


def _connections_to(url: str) -> int:
    """Server sessions on `url`'s database other than the one asking."""
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as db:
        n = db.execute(
            text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
        ).scalar()
    engine.dispose()
    return n


def test_closed_or_dropped_stores_leave_no_server_connections(postgres_url):
    with Store(postgres_url) as store:
        new_search(store)
        assert _connections_to(postgres_url) >= 1  # pooled
    assert _connections_to(postgres_url) == 0
    for _ in range(20):  # a poller that never closes what it opens
        assert Store(postgres_url).get_search("s1").name == "s1"
    assert _connections_to(postgres_url) == 0


def _backend_pid_in_child(store: Store, out) -> None:
    with store._engine.connect() as db:
        out.put((db.execute(text("SELECT pg_backend_pid()")).scalar(), store.get_search("s1").name))


def test_a_forked_child_opens_its_own_connections(postgres_url):
    """A connection pooled before fork() is never used by the child (one socket, two processes)."""
    with Store(postgres_url) as store:
        new_search(store)
        with store._engine.connect() as db:  # the pool now holds this connection
            parent_pid = db.execute(text("SELECT pg_backend_pid()")).scalar()
        ctx = mp.get_context("fork")
        out = ctx.Queue()
        child = ctx.Process(target=_backend_pid_in_child, args=(store, out))
        child.start()
        child_pid, name = out.get(timeout=60)
        child.join(timeout=60)
        assert child.exitcode == 0 and name == "s1" and child_pid != parent_pid
        with store._engine.connect() as db:  # the parent's own session is intact
            assert db.execute(text("SELECT pg_backend_pid()")).scalar() == parent_pid


def test_rungs_are_written_once_and_kept_across_retries(store):
    new_search(store)
    tid = store.start_trial("s1", number=4, config={"arch": ARCH})
    assert store.record_rung("s1", 4, RUNGS[0]) is True
    assert store.record_rung("s1", 4, replace(RUNGS[0], val_loss=9.9)) is False  # never replaced
    assert store.record_rung("s1", 4, replace(RUNGS[0], seed=8)) is True  # another seed of the same rung
    store.finish_trial(tid, failed_result("retrying"))
    store.start_trial("s1", number=4, attempt=1, config={"arch": ARCH})  # the retry keeps the measured rung
    assert [(r.rung, r.seed, r.val_loss) for r in store.rungs("s1")] == [(0, 7, 2.6), (0, 8, 2.6)]
    store.finish_trial(tid, completed_result(seed=7))  # adds the rungs it did not have, keeps rung 0 as it was
    assert [(r.rung, r.seed) for r in store.rungs("s1")] == [(0, 7), (0, 8), (1, 7), (2, 7)]
    assert all(r.executed_flops_per_token == 3.6e6 for r in store.rungs("s1"))
    with pytest.raises(UnknownSearch):
        store.record_rung("nope", 0, RUNGS[0])
