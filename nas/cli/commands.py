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

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

from workers.data.config import DataConfig
from workers.ladder.narrowing import Narrowing
from workers.training.config import OptimConfig

from ..search.settings import PROPOSALS_PER_TRIAL, SAMPLERS, SearchSettings
from ..space.budget import DEFAULT_TRIALS, VALIDATED_TARGET_RATIO, Budget
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


# `nas search --help` in panels: each panel's options get their own columns, so that no option name is cut at
# 80 columns (tests/nas/test_cli_width.py).
OPTIM_DEFAULTS = OptimConfig()  # what a run follows when neither the space nor the command line says
BUDGET, LADDER, DATA, RUNNING = "Budget", "Ladder: what each rung trains", "Data", "Running"


def _budget(field: str):
    return default_of(Budget, field)


def _settings(field: str):
    return default_of(SearchSettings, field)


@app.command()
def search(
    name: str = typer.Option(..., help="Name of the new search."),
    trial_flops: float = typer.Option(
        ...,
        help="Training FLOPs every trial gets: the iso-FLOP budget C of the lowest rung.",
        rich_help_panel=BUDGET,
    ),
    trials: int | None = typer.Option(
        _budget("trials"),
        help=f"Trials to train (default {DEFAULT_TRIALS} unless --search-flops); an infeasible proposal (unaffordable, "
        "or outside the tokens-per-parameter range at T) is recorded and proposed again, up to "
        f"{PROPOSALS_PER_TRIAL} proposals per trial.",
    ),
    search_flops: float | None = typer.Option(
        _budget("search_flops"), help="Training FLOPs of all trials' lowest rungs; trials = search / trial FLOPs."
    ),
    workers: int = typer.Option(_settings("workers"), help="Trials run in parallel.", rich_help_panel=RUNNING),
    space: Path | None = typer.Option(None, help="Search-space YAML (default: the shipped residual_lm space)."),
    candidates: Path | None = typer.Option(
        None,
        help="YAML listing your own configs (candidates: [{residual: nag, n_layers: 24, ...}, ...]): rank exactly "
        "those for T (--trials: their number; the space's shared fields apply).",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the plan (rungs, widths, runs, FLOPs, wall time here) and exit: nothing runs."
    ),
    sampler: str = typer.Option(_settings("sampler"), help=" | ".join(SAMPLERS) + "."),
    seed: int = typer.Option(_settings("seed"), help="Seed of the sampler and of every trial."),
    retries: int = typer.Option(
        _settings("retries"), help="Retries of a trial whose process dies.", rich_help_panel=RUNNING
    ),
    data: str = typer.Option(
        default_of(DataConfig, "source"),
        help="Corpus: 'shipped', a .txt/.jsonl/.parquet file or folder, a token-shard folder, or a hub name.",
        rich_help_panel=DATA,
    ),
    tokenizer: str = typer.Option(
        default_of(DataConfig, "tokenizer"),
        help="bytes | train:V (a byte-level BPE of V tokens trained here) | a tokenizer.json or its folder | hub name.",
        rich_help_panel=DATA,
    ),
    pad_vocab: int = typer.Option(
        _settings("pad_vocab"),
        help="Pad the model's vocabulary to a multiple of this (64 suits GPUs).",
        rich_help_panel=DATA,
    ),
    ray_address: str | None = typer.Option(
        _settings("ray_address"), help="Join this Ray cluster instead of starting a local one.", rich_help_panel=RUNNING
    ),
    ray_dir: str | None = typer.Option(
        _settings("ray_dir"),
        help="Ray Tune's storage path; on a cluster, a folder every node "
        "sees at the same path, or a URI such as s3://bucket/prefix "
        "(default: .resnas/ray beside a SQLite store, else in the working directory).",
        rich_help_panel=RUNNING,
    ),
    gpus_per_trial: float | None = typer.Option(
        _settings("gpus_per_trial"),
        help="GPU share per trial, e.g. 0.25 = 4 trials per GPU; "
        "0 = CPU only (default: the cluster's GPUs shared "
        "among --workers).",
        rich_help_panel=RUNNING,
    ),
    max_trial_seconds: float | None = typer.Option(
        _budget("max_trial_seconds"), help="Wall-clock limit per trial.", rich_help_panel=BUDGET
    ),
    max_search_seconds: float | None = typer.Option(
        _budget("max_search_seconds"), help="Wall-clock limit for the whole search.", rich_help_panel=BUDGET
    ),
    early_stop: bool = typer.Option(
        _settings("early_stopping"), help="Stop trials losing to peers of similar executed FLOPs."
    ),
    objectives: str = typer.Option(
        ",".join(map(str, _settings("objectives"))),
        help="What the search minimises: loss,flops (loss at T, executed FLOPs per token) or loss,flops,kv "
        "(and KV-cache bytes per token, counted at each config's seq_len).",
    ),
    rungs: int | None = typer.Option(
        None,
        help=f"Budgets per trial on its ladder: C, eta C, ... (1 = a single budget). Default {_budget('rungs')}, "
        "trained as every config once at the top rung where a replica ladder saves no compute; given "
        "(or --eta), the ladder is kept as asked.",
        rich_help_panel=LADDER,
    ),
    repeat_seeds: int = typer.Option(
        _settings("repeat_seeds"),
        help="More seeds for each member of the front at the target (noise).",
        rich_help_panel=LADDER,
    ),
    eta: float | None = typer.Option(
        None,
        help=f"Budget ratio between rungs; the best 1/eta of a rung climb on (default {_budget('eta'):g}).",
        rich_help_panel=LADDER,
    ),
    target_flops: float | None = typer.Option(
        _budget("target_flops"),
        help="Training FLOPs of the pretraining run you plan: the budget the search answers for "
        f"(default: {VALIDATED_TARGET_RATIO:g} x the top rung, the furthest checked by make fidelity).",
        rich_help_panel=BUDGET,
    ),
    ladder: str = typer.Option(
        _budget("ladder_kind"),
        help="What a rung trains: 'replica' (a narrower copy at the target's tokens per parameter) "
        "or 'budget' (the config itself, one run branched at each rung).",
        rich_help_panel=LADDER,
    ),
    schedule: str | None = typer.Option(
        None,
        help="The target run's learning-rate schedule: wsd (warmup-stable-decay) or cosine; every rung, repeat, "
        f"export and nas pretrain follows it (default: the space's, else {OPTIM_DEFAULTS.schedule}).",
        rich_help_panel=LADDER,
    ),
    cooldown: float | None = typer.Option(
        None,
        help="wsd: share of each run's last steps spent decaying the LR "
        f"(default: the space's, else {OPTIM_DEFAULTS.cooldown:g}).",
        rich_help_panel=LADDER,
    ),
    min_replica_width: int = typer.Option(
        default_of(Narrowing, "min_width"),
        help="Narrowest replica width: a rung whose on-path replica would be narrower trains this width "
        "for fewer tokens per parameter (off the path). Narrow models run slowly per FLOP.",
        rich_help_panel=LADDER,
    ),
    narrowing: str = typer.Option(
        default_of(Narrowing, "keep"),
        help="What a replica keeps as it narrows: head_size (fewer heads of the target's size) or heads (the head "
        "count, the head size shrinking).",
        rich_help_panel=LADDER,
    ),
    min_replica_share: float = typer.Option(
        default_of(Narrowing, "min_share"),
        help="Narrowest replica as a share of the target's width.",
        rich_help_panel=LADDER,
    ),
    bias_prior: str = typer.Option(
        _budget("bias_prior"),
        help="The top rung's bias the answer takes out: measured (family offsets and a slope in ln(depth/width), "
        "measured on the fidelity corpora) or none.",
        rich_help_panel=LADDER,
    ),
    anchors: int = typer.Option(
        _budget("anchors"),
        help="Trials trained once more above the top rung, for leverage on the bias's slope (fewer than 2: none).",
        rich_help_panel=LADDER,
    ),
    anchor_flops: float | None = typer.Option(
        _budget("anchor_flops"),
        help="Training FLOPs of an anchor (default T/3; T itself, a pretraining run, is allowed).",
        rich_help_panel=LADDER,
    ),
    anchor_share: float = typer.Option(
        _budget("anchor_share"),
        help="Most the anchors may cost, as a share of the trials' training FLOPs.",
        rich_help_panel=LADDER,
    ),
    min_tokens_per_param: float = typer.Option(
        _budget("min_tokens_per_param"),
        help="Train only configs that see at least this many tokens per parameter at the target T (0: no bound): "
        "a config far below compute-optimal there is not a plausible answer.",
        rich_help_panel=BUDGET,
    ),
    max_tokens_per_param: float | None = typer.Option(
        _budget("max_tokens_per_param"),
        help="Train only configs that see at most this many tokens per parameter at T.",
        rich_help_panel=BUDGET,
    ),
    stop_grace: float = typer.Option(
        _settings("stop_grace"),
        help="After a first Ctrl-C or SIGTERM: seconds running trials get to reach their next rung.",
        rich_help_panel=RUNNING,
    ),
    storage: str | None = typer.Option(None, help=STORAGE_HELP),
    progress: bool = typer.Option(True, help="Show the progress bar."),
) -> None:
    """Define a compute budget and a search space, and launch a search.
    \f
    The signature is long because typer declares one parameter per flag. Each option's default is its model's
    field (`Budget`, `SearchSettings`, `DataConfig`), read from the model; the options become those typed models
    here (a bad value is one line naming it), the rest is checked in `checked_search_inputs`.
    """
    from ..search.launch import launch_search
    from ..store import SearchExists, StoreError

    space_spec = checked_space(space, candidates)
    with refused_in_one_line():
        budget = Budget(
            trial_flops=trial_flops,
            trials=candidate_trials(space_spec, trials, search_flops),
            search_flops=search_flops,
            max_trial_seconds=max_trial_seconds,
            max_search_seconds=max_search_seconds,
            **({"rungs": rungs} if rungs is not None else {}),
            **({"eta": eta} if eta is not None else {}),
            layout="as_given" if rungs is not None or eta is not None else "by_cost",
            target_flops=target_flops,
            ladder_kind=ladder,
            narrowing={"min_width": min_replica_width, "min_share": min_replica_share, "keep": narrowing},
            bias_prior=bias_prior,
            anchors=anchors,
            anchor_flops=anchor_flops,
            anchor_share=anchor_share,
            min_tokens_per_param=min_tokens_per_param or None,
            max_tokens_per_param=max_tokens_per_param,
        )
        settings = SearchSettings(
            workers=workers,
            sampler=sampler,
            seed=seed,
            retries=retries,
            ray_address=ray_address,
            ray_dir=validated_ray_dir(ray_dir),
            gpus_per_trial=gpus_per_trial,
            early_stopping=early_stop,
            repeat_seeds=repeat_seeds,
            stop_grace=stop_grace,
            pad_vocab=pad_vocab,
            objectives=objectives,
        )
    space_spec, settings = checked_search_inputs(
        name, space_spec, budget, settings, data, tokenizer, schedule=schedule, cooldown=cooldown
    )
    for line in layout_lines(budget):
        console.print(line)
    if dry_run:
        from .plan_table import print_plan  # torch and Optuna, for the plan alone: other commands start without them

        return print_plan(console, space_spec, budget, settings)
    if ray_address:
        join_ray_cluster(settings)  # before anything is written: a wrong address leaves no search behind
    store = open_store(storage)
    try:
        with _stopped_by_signal(store, name):
            report = launch_search(store, name, space_spec, budget, settings, show_progress=progress)
    except (SearchExists, StoreError) as err:
        fail(f"{err}" + ("; use `nas resume`" if isinstance(err, SearchExists) else ""))
    print_front(console, store, report.name)


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

    store = open_store(storage)
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
