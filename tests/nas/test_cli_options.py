"""`nas search`'s options say what the typed configs say: each option that sets a field of `Budget`,
`SearchSettings` or `DataConfig` has that field's default, so `nas search --help` and a search launched
from Python (`launch_search` with the models' defaults) cannot drift apart, nor can the docs that name a
default. The fields' ranges are not
restated by the CLI: the models check them (`checked_search_inputs`)."""

import inspect
import re
from pathlib import Path

import typer
from pydantic_core import PydanticUndefined

from nas.cli import app
from nas.cli.commands import search
from nas.search.settings import SearchSettings
from nas.space.budget import Budget
from nas.space.objectives import parse_objectives
from workers.data.config import DataConfig
from workers.ladder.narrowing import Narrowing
from workers.training.config import OptimConfig

MODELS = (Budget, SearchSettings, DataConfig)
# Options named differently from the field they set.
FIELD_OF = {
    "early_stop": (SearchSettings, "early_stopping"),
    "data": (DataConfig, "source"),
    "ladder": (Budget, "ladder_kind"),
    "narrowing": (Narrowing, "keep"),
    "min_replica_width": (Narrowing, "min_width"),
    "min_replica_share": (Narrowing, "min_share"),
}
# Options whose None means "what the search space says, else the field's default".
FROM_THE_SPACE = {"schedule": (OptimConfig, "schedule"), "cooldown": (OptimConfig, "cooldown")}
# Options whose None means "the field's default, laid out by cost" (given, the ladder is kept as asked).
NOT_GIVEN = {"rungs": (Budget, "rungs"), "eta": (Budget, "eta")}
CLI_ONLY = {"name", "space", "candidates", "dry_run", "storage", "progress"}  # nothing a config holds
PARSED = {"objectives": parse_objectives}  # options given as text the field parses ("loss,flops")
ROOT = Path(__file__).resolve().parents[2]


def model_fields(model) -> dict:
    return getattr(model, "__pydantic_fields__", None) or model.model_fields


def field_for(option: str):
    if option in FIELD_OF:
        model, name = FIELD_OF[option]
        return model_fields(model)[name]
    found = [model_fields(m)[option] for m in MODELS if option in model_fields(m)]
    assert len(found) <= 1, f"--{option} names a field of several models"
    return found[0] if found else None


def test_every_search_option_has_its_fields_default():
    options = inspect.signature(search).parameters
    checked = set()
    for name, param in options.items():
        cli_default = param.default.default
        assert param.default.help, f"--{name} has no help text"
        if name in CLI_ONLY:
            continue
        if name in FROM_THE_SPACE or name in NOT_GIVEN:
            model, field = {**FROM_THE_SPACE, **NOT_GIVEN}[name]
            assert cli_default is None and model_fields(model)[field].default is not None
            checked.add(name)
            continue
        field = field_for(name)
        assert field is not None, f"--{name} sets no field of {[m.__name__ for m in MODELS]}: add it to CLI_ONLY"
        expected = ... if field.default is PydanticUndefined else field.default
        cli_default = PARSED[name](cli_default) if name in PARSED else cli_default
        assert cli_default == expected, f"--{name}: the CLI's default {cli_default!r}, the model's {expected!r}"
        checked.add(name)
    assert {"trial_flops", "rungs", "eta", "workers", "sampler", "stop_grace", "tokenizer", "data"} <= checked


DOCUMENTED_DEFAULT = re.compile(
    r"`--([a-z][a-z-]*)(?: [^`]*)?`(?: seconds)?(?:,? \(?default:? | \()([0-9][0-9.e+]*)(?=[);,])"
)


def test_the_docs_state_each_options_default_as_the_cli_has_it():
    """Where the README or docs/ give an option's default in numbers ("`--rungs` (default 2", "`--stop-grace`
    seconds (120)"), it is the CLI's (whose defaults are the models', above), or for an option the search
    space may set, the model's."""
    defaults: dict[str, set] = {}
    for command in typer.main.get_command(app).commands.values():
        for param in command.params:
            for opt in param.opts:
                defaults.setdefault(opt, set()).add(param.default)
    for name, (model, field) in {**FROM_THE_SPACE, **NOT_GIVEN}.items():
        defaults[f"--{name}"].add(model_fields(model)[field].default)
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for option, value in DOCUMENTED_DEFAULT.findall(" ".join(doc.read_text().split())):
            assert f"--{option}" in defaults, f"{doc.name}: --{option} is no option of nas"
            numeric = {d for d in defaults[f"--{option}"] if isinstance(d, (int, float))}
            assert float(value) in numeric, f"{doc.name}: --{option} default {value}, the CLI's {numeric}"
            found.append(option)
    assert {"rungs", "eta", "min-tokens-per-param", "stop-grace"} <= set(found)
