"""Every test starts from the same global RNG state; `postgres_url` gives a test its own PostgreSQL database.

Without CUDA, Triton kernels can only run in Triton's CPU interpreter, and `TRITON_INTERPRET` is
read when a kernel is decorated (module import): set it here, before any test imports them. It
changes nothing for the default (reference) path on CPU tensors.

`finished_search` is one real small search, run once per session, for the tests that only read a completed
search (`searches.py`).

Under pytest-xdist (`make test-fast` runs `-n 2`: one worker per core) each worker and the processes its tests start
use one thread, so that the workers share the cores rather than fight over them.

PostgreSQL: `RESNAS_TEST_POSTGRES_URL` (an admin URL of a running server, as `.ci/run` exports)
is used when set; otherwise one private server is started for the session (`postgres_server.py`)
and stopped at its end. Without either, PostgreSQL tests are skipped with the reason, unless
`RESNAS_REQUIRE_POSTGRES=1` (CI), which makes them fail instead.
"""

import os

import pytest
import torch

from postgres_server import LocalPostgres, PostgresUnavailable, create_database, drop_database
from searches import FinishedSearch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
if os.environ.get("PYTEST_XDIST_WORKER"):  # one core per worker, subprocesses included
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


def pytest_collection_modifyitems(items):
    """Mark every test that runs on PostgreSQL `postgres`: the ones using `postgres_url`, and the
    `postgresql` case of fixtures parametrised over both backends (they request it at run time)."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        uses_server = {"postgres_url", "_postgres_admin_url"} & set(item.fixturenames)
        if uses_server or "postgresql" in params.values():
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _postgres_unavailable(reason: str):
    if os.environ.get("RESNAS_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL is required (RESNAS_REQUIRE_POSTGRES=1) but {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL: {reason}")


@pytest.fixture(scope="session")
def _postgres_admin_url():
    """The admin URL of the session's server: from the environment, or a private server started here."""
    given = os.environ.get("RESNAS_TEST_POSTGRES_URL")
    if given:
        yield given
        return
    server = LocalPostgres.temporary()
    try:
        url = server.start()
    except (PostgresUnavailable, OSError) as err:
        server.stop()
        _postgres_unavailable(str(err))
    yield url
    server.stop()


@pytest.fixture
def postgres_url(_postgres_admin_url):
    """`postgresql+psycopg://USER:PASSWORD@127.0.0.1:PORT/DBNAME` of a fresh, empty database, dropped afterwards."""
    try:
        url = create_database(_postgres_admin_url)
    except PostgresUnavailable as err:
        _postgres_unavailable(str(err))
    yield url
    drop_database(_postgres_admin_url, url)


@pytest.fixture(scope="session")
def finished_search(tmp_path_factory) -> FinishedSearch:
    """A completed search on a SQLite store, run once for every test that reads one (read it, never write it:
    `copy_to` gives a test a copy to write to)."""
    folder = tmp_path_factory.mktemp("finished_search")
    return FinishedSearch.run(f"sqlite:///{folder / 'r.db'}", folder)
