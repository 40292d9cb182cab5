"""A search on a real two-node Ray cluster on 127.0.0.1, with PostgreSQL, survives the death of a node.

The head node is `ray start --head --block`, as a user starts it. The worker node joins it from
its own process (`python tests/nas/ray_worker_node.py SPEC`), which starts the node the way
`ray.cluster_utils.Cluster.add_node` (Ray's own multi-node tests) does, because `ray start
--address` cannot join a cluster on 127.0.0.1: with `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (which
makes Ray default to the loopback address) the CLI refuses to start a worker node at all, and
without it the CLI rewrites 127.0.0.1, in both `--address` and `--node-ip-address`, to the host's
routable address, where the loopback-only head does not listen.

Each node has one CPU, so the search's two concurrent trials run one per node. When a trial runs
on the worker node, every process of that node is SIGKILLed (a machine lost): the trial must be
recorded failed, retried on the head, and the search must still finish every trial, losing or
duplicating nothing. Every process the test starts is found from its process tree and from a
marker in its environment (`RAY_TMPDIR`, unique per test), and only those are stopped.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import optuna
import psutil
import pytest
from test_search import assert_listening_on_loopback_only, wait_for

from nas.store import Store, UnknownSearch
from searches import DATA
from workers.trial.contract import TICKET_KEY

pytestmark = [pytest.mark.timeout(600), pytest.mark.cluster, pytest.mark.slow]
RAY = Path(sys.executable).with_name("ray")
SEARCH = "cluster1"
TRIALS = 6
WORKER_NODE = Path(__file__).with_name("ray_worker_node.py")  # a script that imports no test module


@dataclass(frozen=True)
class NodePorts:
    """Every port a Ray node listens on, chosen free on 127.0.0.1 (two nodes share the address)."""

    node_manager_port: int
    object_manager_port: int
    dashboard_agent_listen_port: int
    metrics_agent_port: int  # the dashboard agent's gRPC port (`--dashboard-agent-grpc-port`)
    runtime_env_agent_port: int
    metrics_export_port: int
    min_worker_port: int
    max_worker_port: int


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_block(size: int) -> range:
    """`size` consecutive free ports in 20000-32000: above local Ray's default worker ports
    (10002-19999), below the kernel's ephemeral range (32768+)."""
    for _ in range(200):
        start = random.randrange(20000, 32000 - size)
        if all(_port_is_free(p) for p in range(start, start + size)):
            return range(start, start + size)
    raise RuntimeError(f"no {size} consecutive free ports on 127.0.0.1")


def node_ports(ports: range) -> NodePorts:
    """Six service ports, then the rest as the node's worker-process ports."""
    return NodePorts(*ports[:6], min_worker_port=ports[6], max_worker_port=ports[-1])


class Cluster:
    """A head node and a worker node on 127.0.0.1, each with 1 CPU, under one private temp dir."""

    def __init__(self, base: Path):
        self.base, self.procs = base, []
        ports = free_port_block(1 + 2 * 40)
        self.gcs_address = f"127.0.0.1:{ports[0]}"
        self.head_ports, self.worker_ports = node_ports(ports[1:41]), node_ports(ports[41:81])
        self.env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_TMPDIR": str(base / "tmp"),  # also our marker
            # a token of our own: Ray's default (~/.ray/auth_token) belongs to whoever made it
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
            # a dead node is noticed after ~5 s of failed health checks (default ~15 s)
            "RAY_health_check_period_ms": "1000",
            "RAY_health_check_failure_threshold": "5",
        }
        (base / "tmp").mkdir()
        self.head = self.worker = None

    def start_process(self, args: list[str], log_name: str, **env: str) -> psutil.Popen:
        with open(self.base / log_name, "w") as log:
            proc = psutil.Popen(args, cwd=self.base, env={**self.env, **env}, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        path = self.base / name
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self) -> None:
        p = self.head_ports
        self.head = self.start_process(
            [
                str(RAY),
                "start",
                "--head",
                "--block",
                "--node-ip-address",
                "127.0.0.1",
                "--port",
                self.gcs_address.rsplit(":", 1)[1],
                "--num-cpus",
                "1",
                "--num-gpus",
                "0",
                "--object-store-memory",
                str(100 * 2**20),
                "--include-dashboard",
                "false",
                "--disable-usage-stats",
                "--temp-dir",
                str(self.base / "tmp" / "h"),
                "--node-manager-port",
                str(p.node_manager_port),
                "--object-manager-port",
                str(p.object_manager_port),
                "--dashboard-agent-listen-port",
                str(p.dashboard_agent_listen_port),
                "--dashboard-agent-grpc-port",
                str(p.metrics_agent_port),
                "--runtime-env-agent-port",
                str(p.runtime_env_agent_port),
                "--metrics-export-port",
                str(p.metrics_export_port),
                "--min-worker-port",
                str(p.min_worker_port),
                "--max-worker-port",
                str(p.max_worker_port),
            ],
            "head.log",
        )
        wait_for(lambda: "Ray runtime started" in self.log("head.log") or self.head.poll() is not None, timeout=120)
        assert self.head.poll() is None, self.log("head.log")[-3000:]
        spec = {"gcs_address": self.gcs_address, "temp_dir": str(self.base / "tmp" / "w"), **asdict(self.worker_ports)}
        self.worker = self.start_process([sys.executable, str(WORKER_NODE), json.dumps(spec)], "worker.log")
        wait_for(lambda: "worker node ready" in self.log("worker.log") or self.worker.poll() is not None, timeout=120)
        assert self.worker.poll() is None, self.log("worker.log")[-3000:]

    def tree(self, proc: psutil.Process | None) -> list[psutil.Process]:
        """`proc` and its descendants (empty once it is gone)."""
        try:
            return [proc, *proc.children(recursive=True)] if proc else []
        except psutil.NoSuchProcess:
            return []

    def marked(self) -> list[psutil.Process]:
        """Every live process whose environment carries this cluster's RAY_TMPDIR."""
        mine = []
        for proc in psutil.process_iter():
            try:
                if proc.pid != os.getpid() and proc.environ().get("RAY_TMPDIR") == self.env["RAY_TMPDIR"]:
                    mine.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        return mine

    def stop_all(self) -> None:
        """SIGKILL every process this test started (trees first, then any orphan with our marker)."""
        for _ in range(3):
            victims = {p.pid: p for root in self.procs for p in self.tree(root)}
            victims.update({p.pid: p for p in self.marked()})
            if not victims:
                return
            kill(victims.values())
            time.sleep(0.5)


def kill(procs) -> None:
    """SIGKILL by psutil handle: a PID reused by someone else's process since is left alone."""
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


@pytest.fixture
def cluster():
    base = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))  # short: Ray's unix sockets live under it (108 bytes)
    made = Cluster(base)
    try:
        yield made
    finally:
        made.stop_all()
        shutil.rmtree(base, ignore_errors=True)


def trial_rows(url: str) -> list:
    """The search's trial rows, or [] until the driver has created the search."""
    try:
        with Store(url) as store:
            return store.trials(SEARCH)
    except UnknownSearch:
        return []


def running_trial_of(actor: psutil.Process, ray_dir: Path, running: set[int]) -> int | None:
    """The number of the running trial that the Tune actor process `actor` works on: its working
    directory is `.../working_dirs/<trial name>`, a name Tune makes from the trial's config (the ticket's
    number in it), and Tune keeps that trial's params under ray_dir once it reports."""
    try:
        trial_name = Path(actor.cwd()).name
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    named = re.search(r"TrialTicket_number_(\d+)_", trial_name)  # Tune names the folder after the config
    if named:
        return int(named.group(1)) if int(named.group(1)) in running else None
    for params in ray_dir.glob(f"*/{trial_name}/params.json"):  # written to ray_dir as the trial reports
        number = ticket_number(params)
        return number if number in running else None
    return None


def ticket_number(params: Path) -> int | None:
    """The trial number of the ticket in a Tune trial's params.json (Tune writes the ticket as its repr)."""
    ticket = str(json.loads(params.read_text()).get(TICKET_KEY, ""))
    found = re.search(r"number=(\d+)", ticket)
    return int(found.group(1)) if found else None


def tune_actors(procs: list[psutil.Process]) -> list[psutil.Process]:
    """The Tune function-trainable actors (`ray::ImplicitFunc...`) among `procs`."""
    found = []
    for proc in procs:
        try:
            if "ImplicitFunc" in " ".join(proc.cmdline()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def last_result_pid(ray_dir: Path, number: int) -> int:
    """The PID of the process that made trial `number`'s final report (Tune's result.json)."""
    for params in ray_dir.glob("*/*/params.json"):
        if ticket_number(params) == number:
            lines = params.with_name("result.json").read_text().splitlines()
            return json.loads(lines[-1])["pid"]
    raise AssertionError(f"no Tune trial directory for trial {number}")


def test_search_survives_a_killed_worker_node(cluster, postgres_url):
    cluster.start()
    ray_dir = cluster.base / "shared-ray"  # Tune's storage path: both nodes see it at this path
    driver = cluster.start_process(
        [
            sys.executable,
            "-m",
            "nas.cli",
            "search",
            "--name",
            SEARCH,
            "--trial-flops",
            "3e10",
            "--rungs",
            "1",  # a single budget per trial, as before budget ladders: this test is about the lost node
            "--trials",
            str(TRIALS),
            "--workers",
            "2",
            "--retries",
            "2",
            "--space",
            str(DATA / "tiny_space.yaml"),
            "--ray-address",
            cluster.gcs_address,
            "--ray-dir",
            str(ray_dir),
            "--min-tokens-per-param",
            "0",  # tiny models at a small target: every one is trained
            "--no-progress",
        ],
        "driver.log",
        RESNAS_STORAGE=postgres_url,
    )  # the store's URL from the environment: no password in argv
    head_pids: set[int] = set()  # every process the head node ran, to tell where the retry ran

    def running_trials(min_completed: int = 0) -> tuple[set[int], set[int]] | None:
        """Numbers of the trials running on (head, worker) node, once `min_completed` are stored."""
        head_pids.update(p.pid for p in cluster.tree(cluster.head))
        assert driver.poll() is None, cluster.log("driver.log")[-3000:]
        rows = trial_rows(postgres_url)
        if sum(r.status == "completed" for r in rows) < min_completed:
            return None
        running = {r.number for r in rows if r.status == "running"}
        on = [
            {running_trial_of(a, ray_dir, running) for a in tune_actors(cluster.tree(node))} - {None}
            for node in (cluster.head, cluster.worker)
        ]
        return (on[0], on[1]) if on[1] else None

    def both_nodes_busy() -> bool:
        found = running_trials()
        return bool(found and found[0])

    wait_for(both_nodes_busy, timeout=240, every=0.3)
    assert_listening_on_loopback_only([p.pid for root in cluster.procs for p in cluster.tree(root)])
    _, on_worker = wait_for(lambda: running_trials(min_completed=2), timeout=240, every=0.3)
    worker_node = cluster.tree(cluster.worker)
    kill(worker_node)  # a lost machine: the node's launcher, raylet, agents and the trial's actor, at once
    before = {
        r.number: (r.val_loss, r.tokens_seen) for r in trial_rows(postgres_url) if r.status == "completed"
    }  # what the kill must not lose
    psutil.wait_procs(worker_node, timeout=30)
    assert not any(p.is_running() for p in worker_node)

    while driver.poll() is None:
        head_pids.update(p.pid for p in cluster.tree(cluster.head))
        time.sleep(0.3)
    assert driver.returncode == 0, cluster.log("driver.log")[-4000:]
    with Store(postgres_url) as store:
        rows, search = store.trials(SEARCH), store.get_search(SEARCH)
    assert sorted(r.number for r in rows) == list(range(TRIALS))  # every trial, once
    assert {r.status for r in rows} == {"completed"} and search.status == "completed"
    assert all(math.isfinite(r.val_loss) and r.tokens_seen > 0 for r in rows)
    after = {r.number: (r.val_loss, r.tokens_seen) for r in rows}
    assert len(before) >= 2 and all(after[n] == kept for n, kept in before.items())  # none lost or rewritten
    for number in on_worker:  # interrupted mid-trial, recorded, then retried on the surviving head node
        retried = next(r for r in rows if r.number == number)
        assert retried.attempt >= 1 and retried.previous_attempts, f"trial {number} left no failed attempt"
        failed = retried.previous_attempts[0]
        assert failed["attempt"] == 0 and failed["status"] == "failed" and failed["failure_reason"], failed
        assert last_result_pid(ray_dir, number) in head_pids
    study = optuna.load_study(study_name=search.optuna_study_name, storage=postgres_url)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * TRIALS
