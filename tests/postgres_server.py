"""A private PostgreSQL server for the tests, CI and the load benchmark: one implementation for all three.

`LocalPostgres(base_dir)` runs `initdb` and `pg_ctl` from the PostgreSQL binaries (found through
`RESNAS_POSTGRES_BIN`, then `PATH`, then the newest `/usr/lib/postgresql/*/bin`) and owns nothing
but `base_dir`: the cluster in `base_dir/data`, its unix socket in `base_dir/socket`, its log in
`base_dir/postgres.log`. The server listens on 127.0.0.1 only, on a free port, and its superuser
`resnas` has a random password (scram-sha-256 for every connection).

PostgreSQL refuses to run as root. Run as root, the server runs as the system account `postgres`
(created with `useradd --system` if missing, or `RESNAS_POSTGRES_USER`), which then owns `base_dir`.

Stopping is `pg_ctl stop` on this cluster's data directory, i.e. a signal to the PID in its own
`postmaster.pid`: nothing else is touched. Starting and stopping need the standard library only,
because CI starts the server before the project's virtualenv exists (the database helpers use
the project's driver, psycopg):

    python3 tests/postgres_server.py start DIR [--durable]   # prints the admin URL
    python3 tests/postgres_server.py stop DIR
"""

from __future__ import annotations

import argparse
import glob
import logging
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

log = logging.getLogger(__name__)

SUPERUSER = "resnas"
# Tests trade durability for speed (the data is thrown away); `durable=True` keeps the defaults.
FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


class PostgresUnavailable(RuntimeError):
    """No server could be started here; the message says why, in one line."""


def find_bin_dir() -> Path:
    """The directory holding `initdb` and `pg_ctl`, or `PostgresUnavailable`."""
    candidates = [os.environ.get("RESNAS_POSTGRES_BIN")]
    on_path = shutil.which("pg_ctl")
    candidates.append(str(Path(on_path).parent) if on_path else None)
    candidates += sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
        reverse=True,
    )
    for candidate in filter(None, candidates):
        if all((Path(candidate) / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return Path(candidate)
    raise PostgresUnavailable(
        "no PostgreSQL server binaries (initdb, pg_ctl) found: set RESNAS_POSTGRES_BIN, "
        "or install PostgreSQL (e.g. apt-get install postgresql)"
    )


def server_account() -> pwd.struct_passwd | None:
    """The account the server runs as: None (this user) unless we are root, then a system account."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get("RESNAS_POSTGRES_USER", "postgres")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    done = subprocess.run(
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise PostgresUnavailable(f"cannot create system user {name!r} to run PostgreSQL: {done.stderr.strip()}")
    return pwd.getpwnam(name)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalPostgres:
    """One PostgreSQL cluster in `base_dir` (see the module docstring). Also a context manager."""

    def __init__(self, base_dir: str | Path, *, durable: bool = False, remove_on_stop: bool = False):
        self.base_dir = Path(base_dir).resolve()
        self.durable, self.remove_on_stop = durable, remove_on_stop
        self.data_dir, self.socket_dir = self.base_dir / "data", self.base_dir / "socket"
        self.log_file = self.base_dir / "postgres.log"
        self.url: str | None = None

    @classmethod
    def temporary(cls, *, durable: bool = False) -> LocalPostgres:
        """A server in a fresh directory under the system temp dir (reachable by the server account)."""
        return cls(tempfile.mkdtemp(prefix="resnas-pg-"), durable=durable, remove_on_stop=True)

    @property
    def pid(self) -> int | None:
        """The postmaster's PID, from this cluster's own `postmaster.pid`."""
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def start(self, attempts: int = 3) -> str:
        """initdb, then start on a free 127.0.0.1 port; return the admin URL (database `postgres`)."""
        bin_dir, account = find_bin_dir(), server_account()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        if account is not None:
            for path in (self.base_dir, self.socket_dir):
                os.chown(path, account.pw_uid, account.pw_gid)
        password = secrets.token_hex(16)
        self._initdb(bin_dir, account, password)
        for _ in range(attempts):  # a port found free may be taken before the server binds it
            port = free_port()
            self._write_settings(port)
            done = self._run(
                account, [bin_dir / "pg_ctl", "-D", self.data_dir, "-l", self.log_file, "-w", "-t", "60", "start"]
            )
            if done.returncode == 0:
                self.url = f"postgresql+psycopg://{SUPERUSER}:{password}@127.0.0.1:{port}/postgres"
                log.info("PostgreSQL started: pid %s, 127.0.0.1:%d, %s", self.pid, port, self.base_dir)
                return self.url
            if "Address already in use" not in self._log_tail():
                break
        raise PostgresUnavailable(f"pg_ctl start failed: {self._log_tail() or done.stderr.strip()}")

    def stop(self) -> None:
        """Fast shutdown of this cluster (its own postmaster only); remove `base_dir` if asked to."""
        if self.pid is not None:
            account = None if os.geteuid() != 0 else pwd.getpwuid(self.data_dir.stat().st_uid)
            done = self._run(
                account, [find_bin_dir() / "pg_ctl", "-D", self.data_dir, "-m", "fast", "-w", "-t", "60", "stop"]
            )
            if done.returncode != 0:
                log.warning("pg_ctl stop failed: %s", done.stderr.strip())
        if self.remove_on_stop:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def restart(self, down_seconds: float = 0.0) -> None:
        """A fast shutdown, `down_seconds` with no server, and a start on the same port and data: what a
        maintenance restart or a failover looks like to clients (every connection is dropped)."""
        self.pause()
        time.sleep(down_seconds)
        self.resume()

    def pause(self) -> None:
        """A fast shutdown that keeps the data (every connection is dropped); `resume` starts it again."""
        account = None if os.geteuid() != 0 else pwd.getpwuid(self.data_dir.stat().st_uid)
        done = self._run(
            account, [find_bin_dir() / "pg_ctl", "-D", self.data_dir, "-m", "fast", "-w", "-t", "60", "stop"]
        )
        if done.returncode != 0:
            raise PostgresUnavailable(f"pg_ctl stop failed: {done.stderr.strip()}")

    def resume(self) -> None:
        """Start a paused server on its data and port."""
        account = None if os.geteuid() != 0 else pwd.getpwuid(self.data_dir.stat().st_uid)
        pg_ctl = find_bin_dir() / "pg_ctl"
        done = self._run(account, [pg_ctl, "-D", self.data_dir, "-l", self.log_file, "-w", "-t", "60", "start"])
        if done.returncode != 0:
            raise PostgresUnavailable(f"pg_ctl start failed: {self._log_tail() or done.stderr.strip()}")

    def _initdb(self, bin_dir: Path, account, password: str) -> None:
        pwfile = self.base_dir / "initdb.pw"
        pwfile.write_text(password + "\n")
        if account is not None:
            os.chown(pwfile, account.pw_uid, account.pw_gid)
        try:
            done = self._run(
                account,
                [
                    bin_dir / "initdb",
                    "-D",
                    self.data_dir,
                    "-U",
                    SUPERUSER,
                    f"--pwfile={pwfile}",
                    "--auth=scram-sha-256",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                ],
            )
        finally:
            pwfile.unlink()
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines()
            raise PostgresUnavailable(f"initdb failed: {lines[-1] if lines else done.returncode}")

    def _write_settings(self, port: int) -> None:
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(port),
            "unix_socket_directories": f"'{self.socket_dir}'",
            "max_connections": "300",
            **({} if self.durable else FAST_SETTINGS),
        }
        text = "".join(f"{key} = {value}\n" for key, value in settings.items())
        conf = self.data_dir / "postgresql.auto.conf"  # read last: overrides postgresql.conf
        conf.write_text("# written by tests/postgres_server.py\n" + text)

    def _run(self, account, args: list) -> subprocess.CompletedProcess:
        """Run a PostgreSQL tool as `account` (None: as ourselves), from `base_dir`."""
        as_user = {} if account is None else dict(user=account.pw_uid, group=account.pw_gid, extra_groups=[])
        env = {**os.environ, "HOME": str(self.base_dir), "LC_ALL": "C"}
        return subprocess.run(
            [str(a) for a in args], cwd=self.base_dir, env=env, capture_output=True, text=True, timeout=120, **as_user
        )

    def _log_tail(self) -> str:
        try:
            lines = [line for line in self.log_file.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return ""
        return " | ".join(lines[-3:])


def _connect_admin(admin_url: str):
    """An autocommit psycopg connection to the admin URL's database (default `postgres`)."""
    try:
        import psycopg  # the project's driver: only the database helpers need it, not start/stop
    except ImportError as err:
        raise PostgresUnavailable(f"the PostgreSQL driver is not installed ({err})") from err

    parts = urlsplit(admin_url)
    try:
        return psycopg.connect(
            host=parts.hostname,
            port=parts.port,
            user=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
            dbname=parts.path.lstrip("/") or "postgres",
            autocommit=True,
            connect_timeout=10,
        )
    except psycopg.Error as err:
        raise PostgresUnavailable(
            f"cannot connect to {hide_password(admin_url)}: {str(err).strip().splitlines()[0]}"
        ) from err


def hide_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)))


def create_database(admin_url: str, prefix: str = "resnas_test") -> str:
    """A fresh, empty database on the admin URL's server; its `postgresql+psycopg://` URL."""
    name = f"{prefix}_{secrets.token_hex(6)}"
    with _connect_admin(admin_url) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(admin_url)
    return urlunsplit(parts._replace(scheme="postgresql+psycopg", path=f"/{name}"))


def drop_database(admin_url: str, url: str) -> None:
    """Drop the database of `url` (made by `create_database`), ending any session still on it."""
    name = urlsplit(url).path.lstrip("/")
    with _connect_admin(admin_url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Start or stop a private PostgreSQL server in DIR.")
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("dir", type=Path, help="the server's directory (created by start)")
    parser.add_argument("--durable", action="store_true", help="keep fsync and synchronous commit on")
    args = parser.parse_args(argv)
    server = LocalPostgres(args.dir, durable=args.durable)
    try:
        if args.action == "start":
            print(server.start())
        else:
            server.stop()
    except (PostgresUnavailable, OSError, subprocess.SubprocessError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
