"""Real searches of the tiny space, run as `nas search` in its own process, and the one finished search that the
tests which only read a completed search share (`finished_search` in conftest.py).

A real search costs its Ray start-up plus every step it trains (tens of seconds on 2 CPUs), so a test that
only reads a finished search's store (`nas show`, `nas list`, the dashboard) reads the session's one instead
of running its own, and one that writes to it works on a copy (`FinishedSearch.copy_to`).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"


def nas_args(
    name: str,
    url: str,
    trials: int,
    flops: str = "2e9",
    space: str = "tiny_space.yaml",
    ladder: str = "replica",
    rungs: int = 3,
    eta: int = 3,
    repeat_seeds: int = 1,
) -> list[str]:
    """A search of the tiny space on a ladder of `rungs` rungs (`eta` apart; replicas by default): `flops`
    for the lowest rung; `repeat_seeds` more seeds for the front at the end (0: none).

    The target is 3 x the top rung (the default is 10 x): the replicas are then no narrower than a third
    of the trial's width, so they take about as many steps as the trial itself would. At so small a target
    the tiny configs see under 4 tokens per parameter, so the plausibility bound is off.

    The defaults (3 rungs, eta 3, one repeat seed) are what the smaller tests were written for. The search
    and fault tests ask for the smallest search that still shows what they check (2 rungs, eta 2, the
    product's default; small budgets; no repeats where the test reads none): on 2 CPUs a real search costs
    its Ray start-up plus every step trained, and they used to spend minutes on rungs, repeats and trials
    their assertions never needed."""
    return [
        sys.executable,
        "-m",
        "nas.cli",
        "search",
        "--name",
        name,
        "--trial-flops",
        flops,
        "--trials",
        str(trials),
        "--workers",
        "2",
        "--space",
        str(DATA / space),
        "--storage",
        url,
        "--ladder",
        ladder,
        "--rungs",
        str(rungs),
        "--eta",
        str(eta),
        "--repeat-seeds",
        str(repeat_seeds),
        "--target-flops",
        f"{target_flops(flops, rungs, eta):g}",
        "--min-tokens-per-param",
        "0",
        "--no-progress",
    ]


def target_flops(flops: str, rungs: int, eta: int) -> float:
    """The target `nas_args` asks for: 3 x the top rung."""
    return 3 * eta ** (rungs - 1) * float(flops)


def run(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done


@dataclass(frozen=True)
class FinishedSearch:
    """A completed search `name` in the store at `url`, and what `nas search` printed (`stdout`).

    Two rungs of small budgets, 4 trials, one repeat seed: enough for a trial to climb, the noise rule and the
    front's repeats to run."""

    url: str
    name: str
    stdout: str
    flops: str = "5e8"
    rungs: int = 2
    eta: int = 2
    trials: int = 4

    @classmethod
    def run(cls, url: str, cwd: Path, name: str = "e2e") -> FinishedSearch:
        """Run the search into the store at `url` (a new SQLite file or an empty PostgreSQL database)."""
        spec = cls(url, name, "")
        args = nas_args(name, url, trials=spec.trials, flops=spec.flops, rungs=spec.rungs, eta=spec.eta)
        return cls(url, name, run(args, cwd).stdout)

    @property
    def target(self) -> float:
        return target_flops(self.flops, self.rungs, self.eta)

    def copy_to(self, folder: Path) -> str:
        """The URL of a copy of this SQLite store in `folder`, for a test that writes (SQLite's online backup:
        a consistent copy whatever the WAL holds)."""
        copy = folder / "copy.db"
        with (
            closing(sqlite3.connect(self.url.removeprefix("sqlite:///"))) as src,
            closing(sqlite3.connect(copy)) as dst,
        ):
            src.backup(dst)
        return f"sqlite:///{copy}"
