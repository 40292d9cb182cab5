"""What `nas` is given, checked before anything is written: a new search's space, budget, settings, corpus
and schedule, the Ray options, and a pretraining run's schedule override. Bad input ends in one `error:` line
naming the field, with exit status 2 (`fail`); warnings are printed on `console`, the console every `nas`
command prints on.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import typer
from pydantic import ValidationError
from rich.console import Console

from ..store import STORAGE_ENV

console = Console(width=None if sys.stdout.isatty() else 120)  # the same tables in logs and pipes


def fail(message: str) -> None:
    """Print a one-line error and exit with status 2."""
    typer.echo(f"error: {' '.join(str(message).split())}", err=True)
    raise typer.Exit(2)


def storage_url(storage: str | None) -> str:
    """The store's URL: `--storage`, else $RESNAS_STORAGE, else the SQLite file resnas.db in the cwd."""
    import os

    from ..store import default_url

    return storage or os.environ.get(STORAGE_ENV) or default_url(Path.cwd())


STORAGE_HELP = (
    f"SQLAlchemy URL of the store (default: ${STORAGE_ENV} if set, so a password need not appear on a "
    "command line, else sqlite:///resnas.db in the working directory)."
)


def open_store(storage: str | None, *, read_only: bool = False, create: bool = True):
    """The store at `--storage` (`storage_url`), or a one-line `fail` saying why it cannot be opened. A reading
    command opens it `read_only`: an existing store, never created or upgraded (`nas.store.session`); a command
    that continues a stored search, `create` False: an existing store, upgraded if it must be."""
    from ..store import Store, StoreError

    try:
        return Store(storage_url(storage), read_only=read_only, create=create)
    except StoreError as err:
        fail(str(err))


def field_info(model, field: str):
    """The pydantic FieldInfo of `field` of `model` (a pydantic model or pydantic dataclass)."""
    return (getattr(model, "__pydantic_fields__", None) or model.model_fields)[field]


def default_of(model, field: str):
    """The default of `field` of `model`: what a command-line option that sets that field defaults to, so that
    `--help` shows what the model would fill in, and the value lives once."""
    return field_info(model, field).default


@contextmanager
def refused_in_one_line():
    """Options built into their typed models inside this block: a bad one ends in a one-line `fail` naming it (the
    field's name as its `--option`)."""
    from ..space.messages import options_message

    try:
        yield
    except ValidationError as err:
        fail(options_message(err))
    except ValueError as err:  # a model that words its own errors (`Budget`: `BudgetError`)
        fail(str(err))


def checked_space(space: Path | None, candidates: Path | None):
    """The search's space: `--space` (or the shipped default), or with `--candidates` the space of a search of those
    (a note printed for each candidate outside the space's ranges); else a one-line `fail`."""
    from ..space import SpaceError, load_space
    from ..space.candidates import CandidatesError, load_candidates, outside_the_space, with_candidates

    try:
        spec = load_space(space)
        found = load_candidates(candidates, spec) if candidates is not None else ()
    except (SpaceError, CandidatesError) as err:
        fail(str(err))
    if not found:
        return spec
    for note in outside_the_space(found, spec):
        console.print(f"[yellow]note:[/] {note}")
    return with_candidates(spec, found)


def candidate_trials(space_spec, trials: int | None, search_flops: float | None) -> int | None:
    """`--trials` as given, or for a candidates search the number of candidates (it trains each once)."""
    if not space_spec.candidates:
        return trials
    n = len(space_spec.candidates)
    if search_flops is not None or trials not in (None, n):
        given = f"--trials {trials}" if trials is not None else f"--search-flops {search_flops:g}"
        fail(
            f"{given}: a candidates search trains each of its {n} candidates once; leave it out (or give --trials {n})"
        )
    return n


def checked_search_inputs(
    name: str,
    space_spec,
    budget,
    settings,
    data: str,
    tokenizer: str,
    *,
    schedule: str | None = None,
    cooldown: float | None = None,
):
    """(space spec, settings with the corpus) of a new search of `space_spec` (`checked_space`) with `budget`
    (`Budget`) and `settings` (`SearchSettings`), or a one-line `fail` naming the field.

    The cheap checks run first; the corpus is loaded last (tokenised once, then cached for the
    trials), the space's vocabulary is set from the tokenizer, then the budget is checked against
    the space at its own batch size. `schedule` and `cooldown` override the space's learning-rate schedule.
    """
    from dataclasses import replace

    from ..space.budget import BudgetError, check_budget_fits

    space_spec = with_schedule(space_spec, {"schedule": schedule, "cooldown": cooldown}, budget.ladder.kind)
    if budget.beyond_validated:
        console.print(f"[yellow]warning:[/] {budget.beyond_validated}")
    if not name.strip():
        fail("--name: must be a non-empty name")
    data_fields, corpus = validated_data(data, tokenizer)  # after the cheap checks: it loads the corpus
    settings = replace(settings, data=data_fields, corpus=corpus)
    space_spec = with_vocabulary(space_spec, corpus["vocab_size"], settings.pad_vocab)
    try:
        check_budget_fits(space_spec, budget)
    except BudgetError as err:
        fail(str(err))
    return space_spec, settings


def validated_data(source: str, tokenizer: str = "bytes") -> tuple[dict, dict]:
    """(corpus config fields, corpus summary), after loading the corpus once here (it is then cached
    for the trials), so a typo, a bad tokenizer or an unreachable source fails now, in one line,
    instead of in every trial."""
    from workers.data.config import DataConfig
    from workers.data.corpus import check_shard_source, load_corpus
    from workers.data.shards import ShardError
    from workers.data.tokenizer import TokenizerError

    try:
        config = DataConfig(source=source, tokenizer=tokenizer)
    except ValidationError as err:
        first = err.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        fail(message if message.startswith("--") else f"--{first['loc'][0]}: {message}")
    try:
        check_shard_source(config)
        corpus = load_corpus(config)
    except (TokenizerError, ShardError) as err:
        fail(str(err))
    except Exception as err:  # noqa: BLE001 - any loader failure is bad input here, reported in one line
        fail(f"--data: cannot load {source!r}: {type(err).__name__}: {err}")
    return config.model_dump(exclude_defaults=True), corpus.summary()


def with_schedule(space_spec, options: dict, ladder_kind: str):
    """The space with the search's learning-rate schedule fixed: the options given (not None) over the space's
    own, over OptimConfig's defaults; stored with the search so that every run of it follows the same."""
    from workers.training.config import OptimConfig

    from ..space import space_from_dict
    from ..space.messages import options_message

    given = {k: v for k, v in options.items() if v is not None}
    try:
        OptimConfig(**given)
    except ValidationError as err:
        fail(options_message(err))
    fixed = {**space_spec.schedule_fields(), **space_spec.fixed, **given}
    spec = space_from_dict({**space_spec.spec(), "fixed": fixed})
    if ladder_kind == "budget" and spec.fixed["schedule"] != "wsd":
        fail(
            f"--schedule {spec.fixed['schedule']}: a budget ladder branches each rung's cooldown off one "
            "warmup-stable-decay run; use --schedule wsd, or --ladder replica"
        )
    return spec


def with_vocabulary(space_spec, vocab_size: int, pad_to: int):
    """The space with `vocab_size` fixed at the tokenizer's vocabulary padded to a multiple of `pad_to`
    (or the space's own fixed value, if larger)."""
    if "vocab_size" in space_spec.params:
        fail("--tokenizer: the space searches vocab_size; the vocabulary is the tokenizer's (pad it with --pad-vocab)")
    padded = -(-vocab_size // pad_to) * pad_to
    fixed = {**space_spec.fixed, "vocab_size": max(padded, space_spec.fixed.get("vocab_size", 0))}
    return space_spec.model_copy(update={"fixed": fixed})


def join_ray_cluster(settings) -> None:
    from ..search.ray_env import init_ray

    try:
        init_ray(settings)
    except Exception as err:  # noqa: BLE001 - a malformed or unreachable address is bad input
        fail(f"--ray-address: cannot join the Ray cluster at {settings.ray_address!r}: {type(err).__name__}: {err}")


def validated_ray_dir(ray_dir: str | None) -> str | None:
    """A URI (s3://...) as given; a local path made absolute (every node must see it at that path)."""
    if not ray_dir or "://" in ray_dir:
        return ray_dir
    path = Path(ray_dir).expanduser().resolve()
    if path.exists() and not path.is_dir():
        fail(f"--ray-dir: must be a folder (or a URI), not the file {path}")
    return str(path)


def with_schedule_override(exported, options: dict):
    """The export with the schedule options given (not None) in place of its own, said on the console: the
    search measured its configs under the exported schedule, so a different one is the user's explicit choice."""
    from workers.training.config import OptimConfig

    from ..space.messages import options_message

    given = {k: v for k, v in options.items() if v is not None}
    if not given:
        return exported
    try:
        optim = OptimConfig(**{**exported.optim.model_dump(), **given})
    except ValidationError as err:
        fail(options_message(err))
    was = ", ".join(f"{k} {getattr(exported.optim, k)}" for k in given)
    now = ", ".join(f"{k} {v}" for k, v in given.items())
    console.print(f"[yellow]schedule override:[/] {now} (the search measured this config under {was})")
    return exported.model_copy(update={"optim": optim})
