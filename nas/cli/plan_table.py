"""`nas search ... --dry-run`: the plan of the search as the terminal shows it (`nas.search.plan`), nothing run and
nothing stored: its layout (each rung's budget, expected runs and replica widths), the runs, the training FLOPs in
all and as a multiple of T, and the wall time it would take here; with `--candidates`, a line per candidate."""

from __future__ import annotations

from rich.table import Table

from ..search.plan import SearchPlan, plan_search

__all__ = ["plan_lines", "print_plan"]


def _duration(seconds: float) -> str:
    minutes, s = divmod(round(seconds), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours}h{m:02d}m" if hours else (f"{m}m{s:02d}s" if m else f"{s}s")


def plan_lines(plan: SearchPlan) -> tuple[list[Table], list[str]]:
    """(the tables, the lines under them) of `plan`."""
    layout = Table("rung", "budget C_r (FLOPs)", "runs", "replica widths", title=f"{plan.ladder} ladder, T = "
                   f"{plan.target:.3g} training FLOPs")  # fmt: skip
    for r in plan.rungs:
        widths = "-" if r.widths is None else f"{r.widths[0]}..{r.widths[1]}"
        layout.add_row(str(r.rung), f"{r.budget_flops:.3g}", f"{r.runs:.3g}", widths)
    tables = [layout]
    if plan.candidates:
        each = Table("candidate", "arch", "FLOPs/tok", "replica widths", "runs", "training FLOPs", "time here",
                     title="each candidate, climbing every rung")  # fmt: skip
        for c in plan.candidates:
            widths = ", ".join(map(str, c.widths)) or "-"
            time = "infeasible: " + c.infeasible_reason if c.infeasible_reason else _duration(c.seconds)
            each.add_row(str(c.index), c.arch, f"{c.executed_flops_per_token / 1e6:.2f}M", widths, str(c.runs),
                         f"{c.training_flops:.3g}", time)  # fmt: skip
        tables.append(each)
    trials = f"{plan.trials} trials" + (f" ({plan.trained} would train)" if plan.trained != plan.trials else "")
    trials += f" and {plan.anchors} anchors" if plan.anchors else ""
    trials += f", {plan.level} level configs" if plan.level else ""
    lines = [
        f"{trials}, about {plan.runs:.3g} training runs, {plan.training_flops:.3g} training FLOPs in all "
        f"= {plan.of_target:.3g} x T",
        f"about {_duration(plan.seconds)} here with {plan.workers} workers (one CPU each), from a measured step of "
        + " and ".join(f"{config} ({step:.3g} s/step)" for config, _, step in plan.timed),
        "dry run: nothing trained, nothing stored",
    ]
    return tables, lines


def print_plan(console, space, budget, settings) -> None:
    """Plan the search and print the plan."""
    tables, lines = plan_lines(plan_search(space, budget, settings))
    for table in tables:
        console.print(table)
    for line in lines:
        console.print(line)
