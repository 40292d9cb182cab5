"""The `nas` command line: one small function per command, whose docstring is its help.

Bad input ends with a one-line `error: ...` naming the field, exit code 2, and nothing written.
Its length is typer's: one parameter per flag (`search` alone declares 31); the checks live in
`inputs`, the commands that read a search in `reports`, the Hugging Face commands in `hf`.
"""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

from workers.data.config import DataConfig

from .dashboard_launch import dashboard_launch
from .effects_table import effects
from .front_table import layout_lines, print_front
from .hf import convert, evaluate, generate, write_hf_folder
from .inputs import (
    STORAGE_HELP,
    candidate_trials,
    checked_search_inputs,
    checked_space,
    console,
    default_of,
    fail,
    join_ray_cluster,
    open_store,
    refused_in_one_line,
    validated_data,
    validated_ray_dir,
    with_schedule_override,
)
from .reports import export, list_searches, show, status
from .search_options import SearchOptions, search_signature


class OneLineErrors(TyperGroup):
    """typer's command group, except that usage errors (a missing or unknown option, a value of the wrong
    type or out of an option's range) also end in one `error:` line with exit status 2.

    The app itself carries this rule, so the console script and an in-process `CliRunner` behave alike.
    """

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        args = sys.argv[1:] if args is None else list(args)
        if not standalone_mode or not args:  # no command: typer shows the help
            return super().main(args, prog_name, complete_var, standalone_mode=standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        except TyperException as err:  # click's usage errors: bad option values, missing or unknown options
            typer.echo(f"error: {' '.join(err.format_message().split())}", err=True)
            sys.exit(2)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=OneLineErrors,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Architecture search over residual topologies and depth sparsity.",
)


@app.callback()
def configure_logging(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug messages.")) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


@app.command()
def search(**given: Any) -> None:
    """Define a compute budget and a search space, and launch a search.
    \f
    Its options fill the typed settings they belong to (`nas.cli.search_options`: the budget, how the search runs,
    the corpus, the schedule); each is built once here and validated by its model (a bad value is one line naming
    it), the rest is checked in `checked_search_inputs`.
    """
    from ..search.launch import launch_search
    from ..store import SearchExists, StoreError

    options = SearchOptions(given)
    space_spec = checked_space(options.space, options.candidates)
    with refused_in_one_line():
        budget = options.budget(candidate_trials(space_spec, options.trials, options.search_flops))
        settings = options.settings(validated_ray_dir(options.ray_dir))
    space_spec, settings = checked_search_inputs(
        options.name, space_spec, budget, settings, options.data, options.tokenizer, **options.schedule
    )
    for line in layout_lines(budget):
        console.print(line)
    if options.dry_run:
        from .plan_table import print_plan  # torch and Optuna, for the plan alone: other commands start without them

        return print_plan(console, space_spec, budget, settings)
    if settings.ray_address:
        join_ray_cluster(settings)  # before anything is written: a wrong address leaves no search behind
    store = open_store(options.storage)
    try:
        with _stopped_by_signal(store, options.name):
            report = launch_search(store, options.name, space_spec, budget, settings, show_progress=options.progress)
    except (SearchExists, StoreError) as err:
        fail(f"{err}" + ("; use `nas resume`" if isinstance(err, SearchExists) else ""))
    print_front(console, store, report.name, layout=False)  # the layout's lines were printed before training


search.__signature__ = search_signature()  # type: ignore[attr-defined]  # one typer option per row of OPTIONS


@contextmanager
def _stopped_by_signal(store, name: str):
    """A search stopped by Ctrl-C or SIGTERM exits 128 + the signal, and one stopped by a store outage
    past its retry window exits 75, each with one line on how to finish it."""
    from ..search.interrupt import SearchInterrupted, StoreOutage
    from ..search.launch import finished_trial_numbers

    try:
        yield
    except StoreOutage as outage:
        typer.echo(
            f"error: search {name!r}: {outage}; `nas resume {name}` on this machine writes them and finishes it",
            err=True,
        )
        raise typer.Exit(outage.exit_code) from None
    except SearchInterrupted as stop:
        row = store.get_search(name)
        done = len(finished_trial_numbers(store, name))
        typer.echo(
            f"search {name!r} {stop}: {done} of {row.requested_trials} trials finished, none lost; "
            f"`nas resume {name}` finishes it",
            err=True,
        )
        raise typer.Exit(stop.exit_code) from None


@app.command()
def resume(
    name: str = typer.Argument(..., help="The search to finish."),
    storage: str | None = typer.Option(None, help=STORAGE_HELP),
    ray_address: str | None = typer.Option(None, help="Join this Ray cluster instead of the stored address."),
    progress: bool = typer.Option(True, help="Show the progress bar."),
) -> None:
    """Finish a search that was interrupted: run the trials still missing."""
    from ..search.launch import resume_search
    from ..store import StoreError

    store = open_store(storage, create=False)  # a search to finish is in a store that exists
    try:
        with _stopped_by_signal(store, name):
            report = resume_search(store, name, show_progress=progress, ray_address=ray_address)
    except StoreError as err:
        fail(str(err))
    print_front(console, store, report.name)


app.command("list")(list_searches)
app.command()(status)
app.command()(show)
app.command()(export)
app.command()(effects)


@app.command()
def pretrain(
    file: Path = typer.Argument(..., help="An exported configuration (nas export)."),
    tokens: int | None = typer.Option(None, help="Tokens to train on."),
    target_flops: float | None = typer.Option(None, help="Training compute; tokens by the iso-FLOP rule."),
    data: str = typer.Option(
        default_of(DataConfig, "source"),
        help="Corpus: 'shipped', a file or folder, a token-shard folder, or a hub name.",
    ),
    tokenizer: str | None = typer.Option(
        None, help="Tokenizer (default: the one the search used, recorded in the exported file)."
    ),
    out: Path | None = typer.Option(None, help="Run folder (checkpoints; a re-run resumes)."),
    seed: int = typer.Option(0, help="Seed."),
    schedule: str | None = typer.Option(
        None, help="Override the exported learning-rate schedule (wsd or cosine); the search measured the export's."
    ),
    cooldown: float | None = typer.Option(None, help="Override the exported wsd cooldown share."),
) -> None:
    """Pretrain an exported configuration at full scale with the same model code, training loop and
    learning-rate schedule as the search's runs."""
    import json

    from workers.data.config import DataConfig
    from workers.pretrain.export_format import ExportError, load_exported
    from workers.pretrain.run import PretrainError
    from workers.pretrain.run import pretrain as run_pretraining

    if out is not None and out.exists() and not out.is_dir():
        fail(f"--out: must be a folder (a run folder, created if missing), not the file {out}")
    try:
        exported = load_exported(file)
    except ExportError as err:
        fail(str(err))
    exported = with_schedule_override(exported, {"schedule": schedule, "cooldown": cooldown})
    data_cfg = DataConfig(**validated_data(data, tokenizer or exported.tokenizer_spec(file))[0])
    try:
        summary = run_pretraining(
            exported,
            tokens=tokens,
            target_flops=target_flops,
            data=data_cfg,
            out_dir=out or file.with_suffix(""),
            seed=seed,
        )
    except (ExportError, PretrainError) as err:
        fail(str(err))
    console.print_json(json.dumps(summary, default=str))
    if summary.get("status") == "completed":
        write_hf_folder(Path(summary["out_dir"]))


app.command()(convert)
app.command()(generate)
app.command()(evaluate)


@app.command()
def dashboard(
    storage: str | None = typer.Option(None, help=STORAGE_HELP),
    address: str = typer.Option(
        "127.0.0.1",
        help="IP address to listen on. 0.0.0.0 only inside a container that publishes the port on 127.0.0.1.",
    ),
    port: int = typer.Option(8501, help="Port to listen on (1-65535)."),
) -> None:
    """Browse searches, Pareto fronts and trials in a Streamlit dashboard on 127.0.0.1 (read-only)."""
    import os

    cmd, env = dashboard_launch(storage, address, port)
    open_store(storage, read_only=True).close()  # the store must exist: a missing one is one line, never created
    sys.stdout.flush()
    # Streamlit replaces this process (same PID): stopping `nas dashboard` stops the server, and a
    # killed parent never leaves an orphaned server listening.
    os.execve(cmd[0], cmd, env)


@app.command()
def families(
    steps: int = typer.Option(
        40, min=1, max=100_000, help="Training steps per variant (the search's trainer, optimiser and schedule)."
    ),
    batch: int = typer.Option(8, min=1, max=4096, help="Sequences per step."),
    seed: int = typer.Option(0, help="Seed for weights and batches."),
) -> None:
    """Build each residual family, print its parameters and FLOPs, and train it a few steps."""
    from .families import run_families

    run_families(steps=steps, batch=batch, seed=seed)


def main() -> None:
    """The `nas` console script: the app on the command line's arguments (`OneLineErrors` says how it exits)."""
    app()
