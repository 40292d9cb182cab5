"""`nas effects NAME`: what the search learned about each knob, as a table and in words.

One row per knob term (`nas.answer.effects`): its signed effect on the predicted loss at T for its step (negative
lowers the loss), the 80% interval, Optuna's importance of the knob, and whether it is resolved or why not. Under
the table, one line per resolved term in words. The table reads in 120 columns: the reason column wraps.
"""

from __future__ import annotations

import importlib.abc
import math
import sys

import typer
from rich.table import Column, Table

from ..answer.effects import AT_EQUAL
from .inputs import STORAGE_HELP, console, fail, open_store

__all__ = ["AT_EQUAL_CHOICES", "EFFECT_COLUMNS", "effects", "effects_report", "load_effects"]

AT_EQUAL_CHOICES = ("flops", "params")
EFFECT_COLUMNS = ("knob", "step", "effect", "80% interval", "importance", "resolved")


def _signed(x: float | None) -> str:
    return "-" if x is None else f"{x:+.4f}"


def effects_table(found, title: str) -> Table:
    """The Effects as a rich table (module docstring)."""
    table = Table(*(Column(c, no_wrap=c != "resolved", overflow="fold") for c in EFFECT_COLUMNS), title=title)
    for e in found.effects:
        interval = "-" if e.low is None else f"[{e.low:+.4f}, {e.high:+.4f}]"
        importance = "-" if e.importance is None else f"{e.importance:.2f}"
        table.add_row(e.knob, e.step, _signed(e.effect), interval, importance, "yes" if e.resolved else e.reason)
    return table


def load_effects(store, name: str, at_equal: str = "flops", target_flops: float | None = None):
    """The search's Effects at `target_flops` (default: its own target), read from the store. Raises ValueError
    naming the bad field."""
    from ..answer.search_effects import search_effects
    from ..search_answer import search_answer
    from ..space import space_from_dict, to_optuna_distributions
    from ..space.budget import stored_budget

    if at_equal not in AT_EQUAL_CHOICES:
        raise ValueError(f"--at-equal must be one of {', '.join(AT_EQUAL_CHOICES)}, not {at_equal!r}")
    search = store.get_search(name)
    ladder = stored_budget(search.budget).ladder
    target = ladder.target_flops if target_flops is None else target_flops
    if not math.isfinite(target) or target <= ladder.top_flops:
        top = ladder.top_flops
        raise ValueError(f"--target-flops must be above the search's top rung {top:.3g}, not {target:g}")
    found = search_answer(store, name, target)
    if found.answer is None:
        raise ValueError(f"search {name!r} has no measured rungs yet: no loss at T to read effects from")
    distributions = to_optuna_distributions(space_from_dict(search.space))
    return search_effects(found.rows, found.answer, distributions, at_equal)


def effects_report(name: str, found) -> tuple[Table, list[str]]:
    """(the table, the lines under it) of search `name`'s Effects."""
    title = (
        f"{name}: each knob's effect on the loss at T = {found.target:.3g} FLOPs, at equal "
        f"{AT_EQUAL[found.at_equal]} ({found.trials} trials)"
    )
    lines = [*found.notes]
    lines.append("effect: nats of predicted loss at T for the step (negative is better); "
                 f"80% bootstrap interval; importance: {found.evaluator}")  # fmt: skip
    words = found.sentences()
    lines += words or ["no knob resolved: every interval spans 0, or the search barely varied it"]
    return effects_table(found, title), lines


def effects(
    name: str = typer.Argument(..., help="The search."),
    at_equal: str = typer.Option("flops", "--at-equal", help="Hold fixed: flops (FLOPs per token) or params."),
    target_flops: float | None = typer.Option(None, help="Read the effects at this compute (default: the search's)."),
    storage: str | None = typer.Option(None, help=STORAGE_HELP),
) -> None:
    """Each knob's signed effect on the loss at T at matched cost, with an 80% interval, and in words."""
    from ..store import StoreError

    import_importance_without_sklearn()
    store = open_store(storage, read_only=True)
    try:
        found = load_effects(store, name, at_equal, target_flops)
    except (ValueError, StoreError) as err:
        fail(str(err))
    table, lines = effects_report(name, found)
    console.print(table)
    for line in lines:
        console.print(line)


class _Hidden(importlib.abc.MetaPathFinder):
    """A finder that makes `package` and its submodules fail to import."""

    def __init__(self, package: str):
        self.package = package

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] == self.package:
            raise ModuleNotFoundError(f"{fullname} is hidden here", name=fullname)
        return None


def import_importance_without_sklearn() -> None:
    """Import `optuna.importance` with scikit-learn hidden, for a process that reads PED-ANOVA alone.

    The package also imports its fANOVA and impurity evaluators, whose modules try-import scikit-learn (a large
    share of `nas effects`' start-up) and defer a failure to their first use; PED-ANOVA needs none of it. So in
    this process those two evaluators would report scikit-learn missing, which `nas effects` never asks them.
    Nothing to do where either is imported already; imported as usual if Optuna cannot import without it."""
    if "optuna.importance" in sys.modules or "sklearn" in sys.modules:
        return
    hidden = _Hidden("sklearn")
    sys.meta_path.insert(0, hidden)
    try:
        import optuna.importance  # noqa: F401
    except ImportError:
        pass  # a later Optuna that needs it: `param_importances` imports it with scikit-learn
    finally:
        sys.meta_path.remove(hidden)
