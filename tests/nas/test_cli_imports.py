"""The `nas` command starts without torch, SciPy's optimisers or Ray: the commands that read a store (`nas show`,
`nas effects`, `nas list`) answer in about a second, and import those only when they train, plan or fit."""

import subprocess
import sys

HEAVY = ("torch", "ray", "scipy.optimize", "scipy.stats")


def _imported_by(code: str) -> dict[str, bool]:
    probe = f"import sys\n{code}\nprint(*[m in sys.modules for m in {HEAVY!r}])"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    return dict(zip(HEAVY, (flag == "True" for flag in out), strict=True))


def test_the_command_line_imports_none_of_the_heavy_packages_until_it_needs_them():
    assert not any(_imported_by("import nas.cli.commands").values())
    # a package's typed configs alone do not pull in what the package runs
    assert not any(
        _imported_by("from workers.data import DataConfig\nfrom workers.ladder.replica import plan_replica").values()
    )
    assert _imported_by("from workers import run_trial")["torch"]  # and its parts are there on first use
