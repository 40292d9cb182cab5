"""`nas search`'s options, grouped by the typed setting each fills: the budget (`nas.space.budget.Budget`, with the
replicas' `Narrowing`), how the search runs (`nas.search.settings.SearchSettings`), the corpus
(`workers.data.config.DataConfig`), the target run's schedule (`workers.training.config.OptimConfig`, over the
space's), and the command's own (the name, the space, the store).

Each option is one `Option` row: its parameter name (the flag, with dashes), the setting and field it fills, its
help, its help panel. Its default is that field's default, read from the model, so `nas search --help`, a search
launched from Python and the docs cannot drift apart; an option whose None means "not given" (`--rungs`, `--eta`:
laid out by cost unless given; `--schedule`, `--cooldown`: the space's) says so. `search_signature` turns the table
into the command's signature, which typer reads; `SearchOptions` turns the values given back into the typed
settings, each built once and validated by its model.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from workers.data.config import DataConfig
from workers.ladder.narrowing import Narrowing
from workers.training.config import OptimConfig

from ..search.settings import PROPOSALS_PER_TRIAL, SAMPLERS, SearchSettings
from ..space.budget import DEFAULT_TRIALS, VALIDATED_TARGET_RATIO, Budget
from .inputs import STORAGE_HELP, default_of, field_info

__all__ = ["OPTIONS", "Option", "SearchOptions", "search_signature"]

BUDGET, LADDER, FORECAST, DATA, RUNNING = (
    "Budget",
    "Ladder: what each rung trains",
    "Forecast: the level at T, the bias, anchors",
    "Data",
    "Running",
)
MODELS: dict[str, Any] = {
    "budget": Budget,
    "narrowing": Narrowing,
    "settings": SearchSettings,
    "data": DataConfig,
    "optim": OptimConfig,
}
FIELD_DEFAULT = object()  # an option whose default is its field's


@dataclass(frozen=True)
class Option:
    """One option of `nas search`: `name` (the flag `--name` with dashes), the `setting` and `field` it fills
    (setting None: the command's own), its help and panel; `annotation` and `default` where they are not the
    field's, `given_only` where None means not given."""

    name: str
    setting: str | None
    field: str | None
    help: str
    panel: str | None = None
    annotation: Any = None
    default: Any = FIELD_DEFAULT
    given_only: bool = False
    flag_args: tuple[str, ...] = ()

    @property
    def model_default(self) -> Any:
        """The option's default: the default of the field it fills (typer's `...`: required), or its own where it
        has one (the text a field parses)."""
        if self.default is not FIELD_DEFAULT or self.setting is None or self.field is None:
            return None if self.default is FIELD_DEFAULT else self.default
        info = field_info(MODELS[self.setting], self.field)
        return ... if info.is_required() else info.default

    def parameter(self) -> inspect.Parameter:
        """The command's parameter for typer: a `typer.Option` with the field's default (None where given_only)."""
        default = None if self.given_only else self.model_default
        annotation = self.annotation or field_info(MODELS[self.setting], self.field).annotation
        option = typer.Option(default, *self.flag_args, help=self.help, rich_help_panel=self.panel)
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)


def _b(name: str, help: str, panel: str = BUDGET, **kw) -> Option:
    return Option(name, "budget", kw.pop("field", name), help, panel, **kw)


def _s(name: str, help: str, panel: str | None = None, **kw) -> Option:
    return Option(name, "settings", kw.pop("field", name), help, panel, **kw)


OPTIONS: tuple[Option, ...] = (
    Option("name", None, None, "Name of the new search.", annotation=str, default=...),
    _b("trial_flops", "Training FLOPs every trial gets: the iso-FLOP budget C of the lowest rung."),
    _b(
        "trials",
        f"Trials to train (default {DEFAULT_TRIALS} unless --search-flops); an infeasible proposal "
        "(unaffordable, or outside the tokens-per-parameter range at T) is recorded and proposed again, up to "
        f"{PROPOSALS_PER_TRIAL} proposals per trial.",
        None,
    ),
    _b("search_flops", "Training FLOPs of all trials' lowest rungs; trials = search / trial FLOPs.", None),
    _s("workers", "Trials run in parallel.", RUNNING),
    Option("space", None, None, "Search-space YAML (default: the shipped residual_lm space).", annotation=Path | None),
    Option(
        "candidates",
        None,
        None,
        "YAML listing your own configs (candidates: [{residual: nag, n_layers: 24, "
        "...}, ...]): rank exactly those for T (--trials: their number; the space's shared fields apply).",
        annotation=Path | None,
    ),
    Option(
        "dry_run",
        None,
        None,
        "Print the plan (rungs, widths, runs, FLOPs, wall time here) and exit: nothing runs.",
        annotation=bool,
        default=False,
        flag_args=("--dry-run",),
    ),
    _s("sampler", " | ".join(SAMPLERS) + ".", annotation=str),
    _s("seed", "Seed of the sampler and of every trial."),
    _s("retries", "Retries of a trial whose process dies.", RUNNING),
    Option(
        "data",
        "data",
        "source",
        "Corpus: 'shipped', a .txt/.jsonl/.parquet file or folder, a token-shard folder, or a hub name.",
        DATA,
        annotation=str,
    ),
    Option(
        "tokenizer",
        "data",
        "tokenizer",
        "bytes | train:V (a byte-level BPE of V tokens trained here) | a tokenizer.json or its folder | hub name.",
        DATA,
        annotation=str,
    ),
    _s("pad_vocab", "Pad the model's vocabulary to a multiple of this (64 suits GPUs).", DATA),
    _s("ray_address", "Join this Ray cluster instead of starting a local one.", RUNNING),
    _s(
        "ray_dir",
        "Ray Tune's storage path; on a cluster, a folder every node sees at the same path, or a URI such "
        "as s3://bucket/prefix (default: .resnas/ray beside a SQLite store, else in the working directory).",
        RUNNING,
    ),
    _s(
        "gpus_per_trial",
        "GPU share per trial, e.g. 0.25 = 4 trials per GPU; 0 = CPU only (default: the "
        "cluster's GPUs shared among --workers).",
        RUNNING,
    ),
    _b("max_trial_seconds", "Wall-clock limit per trial."),
    _b("max_search_seconds", "Wall-clock limit for the whole search."),
    _s("early_stop", "Stop trials losing to peers of similar executed FLOPs.", field="early_stopping"),
    _s(
        "objectives",
        "What the search minimises: loss,flops (loss at T, executed FLOPs per token) or loss,flops,kv "
        "(and KV-cache bytes per token, counted at each config's seq_len).",
        annotation=str,
        default=",".join(map(str, default_of(SearchSettings, "objectives"))),
    ),
    _b(
        "rungs",
        f"Budgets per trial on its ladder: C, eta C, ... (1 = a single budget). Default "
        f"{default_of(Budget, 'rungs')}, trained as every config once at the top rung where a replica ladder "
        "saves no compute; given (or --eta), the ladder is kept as asked.",
        LADDER,
        annotation=int | None,
        given_only=True,
    ),
    _s("repeat_seeds", "More seeds for each member of the front at the target (noise).", LADDER),
    _b(
        "eta",
        f"Budget ratio between rungs; the best 1/eta of a rung climb on (default {default_of(Budget, 'eta'):g}).",
        LADDER,
        annotation=float | None,
        given_only=True,
    ),
    _b(
        "target_flops",
        "Training FLOPs of the pretraining run you plan: the budget the search answers for "
        f"(default: {VALIDATED_TARGET_RATIO:g} x the top rung, the furthest checked by make fidelity).",
    ),
    _b(
        "ladder",
        "What a rung trains: 'replica' (a narrower copy at the target's tokens per parameter) or 'budget' "
        "(the config itself, one run branched at each rung).",
        LADDER,
        field="ladder_kind",
        annotation=str,
    ),
    Option(
        "schedule",
        "optim",
        "schedule",
        "The target run's learning-rate schedule: wsd (warmup-stable-decay) or "
        "cosine; every rung, repeat, export and nas pretrain follows it (default: the space's, else "
        f"{OptimConfig().schedule}).",
        LADDER,
        annotation=str | None,
        given_only=True,
    ),
    Option(
        "cooldown",
        "optim",
        "cooldown",
        "wsd: share of each run's last steps spent decaying the LR (default: "
        f"the space's, else {OptimConfig().cooldown:g}).",
        LADDER,
        annotation=float | None,
        given_only=True,
    ),
    Option(
        "min_replica_width",
        "narrowing",
        "min_width",
        "Narrowest replica width: a rung whose on-path replica "
        "would be narrower trains this width for fewer tokens per parameter (off the path). Narrow models run "
        "slowly per FLOP.",
        LADDER,
    ),
    Option(
        "narrowing",
        "narrowing",
        "keep",
        "What a replica keeps as it narrows: head_size (fewer heads of the "
        "target's size) or heads (the head count, the head size shrinking).",
        LADDER,
        annotation=str,
    ),
    Option(
        "min_replica_share", "narrowing", "min_share", "Narrowest replica as a share of the target's width.", LADDER
    ),
    _b(
        "level_configs",
        "Configs also trained at a quarter and a third of the top rung, on the target's path, for "
        "the level at T (fewer than 2: none; the losses stated are then the top rung's).",
        FORECAST,
    ),
    _b("level_share", "Most the level configs may cost, as a share of the trials' training FLOPs.", FORECAST),
    _b(
        "bias_prior",
        "The top rung's bias the answer takes out: measured (family offsets and a slope in "
        "ln(depth/width), measured on the fidelity corpora) or none.",
        FORECAST,
        annotation=str,
    ),
    _b(
        "anchors",
        "Trials trained once more above the top rung, for leverage on the bias's slope (fewer than 2: none).",
        FORECAST,
    ),
    _b("anchor_flops", "Training FLOPs of an anchor (default T/3; T itself, a pretraining run, is allowed).", FORECAST),
    _b("anchor_share", "Most the anchors may cost, as a share of the trials' training FLOPs.", FORECAST),
    _b(
        "min_tokens_per_param",
        "Train only configs that see at least this many tokens per parameter at the target T "
        "(0: no bound): a config far below compute-optimal there is not a plausible answer.",
        annotation=float,
    ),
    _b("max_tokens_per_param", "Train only configs that see at most this many tokens per parameter at T."),
    _s("stop_grace", "After a first Ctrl-C or SIGTERM: seconds running trials get to reach their next rung.", RUNNING),
    Option("storage", None, None, STORAGE_HELP, annotation=str | None),
    Option("progress", None, None, "Show the progress bar.", annotation=bool, default=True),
)


def search_signature() -> inspect.Signature:
    """The `search` command's signature: one typer option per row of OPTIONS."""
    return inspect.Signature([o.parameter() for o in OPTIONS], return_annotation=None)


@dataclass
class SearchOptions:
    """The values `nas search` was given, by option name; each setting built from them once (module docstring)."""

    given: Mapping[str, Any]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self.given:
            raise AttributeError(name)
        return self.given[name]

    def fields(self, setting: str) -> dict[str, Any]:
        """The values given for `setting`'s fields (an option not given, where None means so, is left out)."""
        out = {}
        for o in OPTIONS:
            if o.setting == setting and not (o.given_only and self.given.get(o.name) is None):
                out[o.field] = self.given[o.name]
        return out

    def budget(self, trials: int | None) -> Budget:
        """The Budget: the fields given, the narrowing as one object, the ladder kept as asked where --rungs or
        --eta was given; `trials`: the number the space's candidates imply, if any."""
        values = self.fields("budget") | {"narrowing": self.fields("narrowing"), "trials": trials}
        as_given = any(self.given.get(k) is not None for k in ("rungs", "eta"))
        values["min_tokens_per_param"] = values["min_tokens_per_param"] or None  # 0: no bound
        return Budget(**values, layout="as_given" if as_given else "by_cost")

    def settings(self, ray_dir: str | None) -> SearchSettings:
        """The SearchSettings (`ray_dir` as checked by the command)."""
        return SearchSettings(**(self.fields("settings") | {"ray_dir": ray_dir}))

    @property
    def schedule(self) -> dict[str, Any]:
        """The schedule options given (None: the space's)."""
        return {k: self.given.get(k) for k in ("schedule", "cooldown")}
