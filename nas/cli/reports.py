"""The `nas` commands that read a search from the store: `list`, `status`, `show` (a table, or with `--json` the
answer as data: `nas.search_answer.SearchAnswer.as_dict`) and `export` (which writes files, never the store).
Registered on the app by `nas.cli.commands`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import typer
from rich.cells import cell_len
from rich.table import Column, Table

from .front_table import format_flops, format_loss, print_front
from .inputs import STORAGE_HELP, console, fail, open_store

LIST_COLUMNS = (
    "search",
    "status",
    "created",
    "requested",
    "done",
    "failed",
    "running",
    "tokenizer",
    "best loss",
    "best bpb",
)
# What `nas list` leaves out, first to last, while the table is wider than the terminal: never the search's
# name, which `nas show`, `status`, `export` and `resume` are given.
LIST_DROPS = ("created", "requested", "running", "tokenizer", "best bpb", "failed", "best loss", "done", "status")

STATUS_COLUMNS = ("trial", "try", "status", "residual", "layers", "d", "mod", "val loss", "FLOPs/tok", "reason")
# `nas status NAME` keeps the trial's number (`nas export --trial N`), its status and why it failed.
STATUS_DROPS = ("try", "mod", "d", "layers", "FLOPs/tok", "residual", "val loss")


def fitted_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, drops: Sequence[str], wrap: str, width: int
) -> Table:
    """`rows` under `headers`, no cell cut at `width` columns: each column on one line, except `wrap`'s, which
    wraps between words (and folds a word wider than the terminal alone onto the next line, never ending it in
    an ellipsis); the columns named in `drops` are left out, in that order, until that fits (a caption names
    them)."""

    def needs(column: int) -> int:  # its widest cell, or for `wrap` its longest word
        cells = [headers[column], *(row[column] for row in rows)]
        words = [w for c in cells for w in c.split()] if headers[column] == wrap else cells
        return max(map(cell_len, words), default=0)

    shown = list(headers)
    for dropped in drops:
        # rich's default box: one space either side of each cell, a rule between columns and at both edges
        if sum(needs(headers.index(h)) + 3 for h in shown) + 1 <= width:
            break
        shown.remove(dropped)
    table = Table(*(Column(h, no_wrap=h != wrap, overflow="fold") for h in shown))
    for row in rows:
        table.add_row(*(row[headers.index(h)] for h in shown))
    hidden = [h for h in headers if h not in shown]
    if hidden:
        table.caption = f"hidden to fit {width} columns: {', '.join(hidden)}"
    return table


def list_searches(storage: str | None = typer.Option(None, help=STORAGE_HELP)) -> None:
    """List the searches in the store with their trial counts, tokenizer and best loss (nats and bits per byte)."""
    store = open_store(storage, read_only=True)
    tokenizers, rows = {}, []
    for s in store.list_searches():
        corpus = (store.get_search(s.name).settings or {}).get("corpus") or {}
        tokenizers[corpus.get("tokenizer", "bytes")] = corpus.get("tokenizer_spec", "bytes")
        rows.append(
            (
                s.name,
                s.status,
                f"{s.created_at:%Y-%m-%d %H:%M}",
                str(s.requested_trials),
                str(s.completed + s.other),
                str(s.failed),
                str(s.running),
                corpus.get("tokenizer_spec", "bytes"),
                format_loss(s.best_val_loss),
                format_loss(s.best_val_bpb),
            )
        )
    table = fitted_table(LIST_COLUMNS, rows, drops=LIST_DROPS, wrap="search", width=console.width)
    console.print(table)
    if len(tokenizers) > 1:
        console.print(
            f"[yellow]warning:[/] these searches use {len(tokenizers)} different tokenizers "
            f"({', '.join(sorted(tokenizers.values()))}): nats per token do not compare across them; "
            "bits per byte do (nas show NAME --bpb)"
        )


def status(
    name: str | None = typer.Argument(None, help="A search (default: all)."),
    storage: str | None = typer.Option(None, help=STORAGE_HELP),
) -> None:
    """Show per-trial status of a search (or list all searches)."""
    from ..store import StoreError

    if name is None:
        return list_searches(storage)
    store = open_store(storage, read_only=True)
    try:
        rows = store.trials(name)
    except StoreError as err:
        fail(str(err))
    cells = [
        (
            str(r.number),
            str(r.attempt),
            r.status,
            r.residual or "-",
            str(r.n_layers or "-"),
            str(r.d_model or "-"),
            f"{r.mod_rate:g}" if r.mod_rate is not None else "-",
            format_loss(r.val_loss),
            format_flops(r.executed_flops_per_token),
            (r.failure_reason or "")[:60],
        )
        for r in rows
    ]
    table = fitted_table(STATUS_COLUMNS, cells, drops=STATUS_DROPS, wrap="reason", width=console.width)
    console.print(table)


def show(
    name: str = typer.Argument(..., help="The search."),
    pareto: bool = typer.Option(False, "--pareto", help="Only the Pareto front."),
    bpb: bool = typer.Option(False, "--bpb", help="Losses in bits per byte (comparable across tokenizers)."),
    wide: bool = typer.Option(False, "--wide", help="Every column: lr, heads, top replica, held-out error, basis."),
    as_json: bool = typer.Option(
        False, "--json", help="The answer as one JSON object (every trial, the front, what it rests on; nats)."
    ),
    storage: str | None = typer.Option(None, help=STORAGE_HELP),
) -> None:
    """Show a search's completed trials, or with --pareto its front and hypervolume, or with --json its answer as
    data."""
    import json

    from ..search_answer import search_answer
    from ..store import StoreError

    store = open_store(storage, read_only=True)
    try:
        found = search_answer(store, name)
    except StoreError as err:
        fail(str(err))
    if as_json:
        typer.echo(json.dumps(found.as_dict(), indent=2))
        return
    print_front(console, store, name, only_front=pareto, bpb=bpb, wide=wide)


def export(
    name: str = typer.Argument(..., help="The search."),
    out: Path = typer.Option(..., "--out", help="Folder for the YAML files and index.json."),
    pareto: bool = typer.Option(False, "--pareto", help="Every trial on the Pareto front."),
    trial: int | None = typer.Option(None, "--trial", help="One trial, by number."),
    target_flops: float | None = typer.Option(None, help="Recommend a token budget for this compute."),
    freeze_ancre: bool = typer.Option(False, help="Pretrain with ANCRe's learned coefficients frozen."),
    storage: str | None = typer.Option(None, help=STORAGE_HELP),
) -> None:
    """Export the best configurations (one YAML each, plus index.json) for full pretraining."""
    from ..export import ExportError, export_configs
    from ..store import StoreError

    if not pareto and trial is None:
        fail("--pareto or --trial N: say which trials to export")
    store = open_store(storage, read_only=True)
    try:
        paths = export_configs(
            store, name, out, pareto=pareto, trial=trial, target_flops=target_flops, freeze_ancre=freeze_ancre
        )
    except (ExportError, StoreError) as err:
        fail(str(err))
    for path in paths:
        console.print(str(path))
