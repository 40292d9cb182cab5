"""The `nas` commands that read a search from the store: `list`, `status`, `show` and `export` (which writes
files, never the store). Registered on the app by `nas.cli.commands`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from .front_table import format_flops, format_loss, print_front
from .inputs import STORAGE_HELP, console, fail, open_store


def list_searches(storage: str | None = typer.Option(None, help=STORAGE_HELP)) -> None:
    """List the searches in the store with their trial counts, tokenizer and best loss (nats and bits per byte)."""
    store = open_store(storage)
    table = Table(
        "search", "status", "created", "requested", "done", "failed", "running", "tokenizer", "best loss", "best bpb"
    )
    tokenizers = {}
    for s in store.list_searches():
        corpus = (store.get_search(s.name).settings or {}).get("corpus") or {}
        tokenizers[corpus.get("tokenizer", "bytes")] = corpus.get("tokenizer_spec", "bytes")
        table.add_row(
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
    store = open_store(storage)
    try:
        rows = store.trials(name)
    except StoreError as err:
        fail(str(err))
    table = Table("trial", "try", "status", "residual", "layers", "d", "mod", "val loss", "FLOPs/tok", "reason")
    for r in rows:
        table.add_row(
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
    console.print(table)


def show(
    name: str = typer.Argument(..., help="The search."),
    pareto: bool = typer.Option(False, "--pareto", help="Only the Pareto front."),
    bpb: bool = typer.Option(False, "--bpb", help="Losses in bits per byte (comparable across tokenizers)."),
    wide: bool = typer.Option(False, "--wide", help="Every column: lr, heads, top replica, held-out error, basis."),
    storage: str | None = typer.Option(None, help=STORAGE_HELP),
) -> None:
    """Show a search's completed trials, or with --pareto its front and hypervolume."""
    from ..store import StoreError

    store = open_store(storage)
    try:
        store.get_search(name)
    except StoreError as err:
        fail(str(err))
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
    store = open_store(storage)
    try:
        paths = export_configs(
            store, name, out, pareto=pareto, trial=trial, target_flops=target_flops, freeze_ancre=freeze_ancre
        )
    except (ExportError, StoreError) as err:
        fail(str(err))
    for path in paths:
        console.print(str(path))
