"""What a search is asked: its space (the spec in `spec.py`, read from YAML by `loading.py`, sampled by
`sampling.py`; or the user's own candidates, `candidates.py`) and its compute budget (`budget.py`: how each trial
is measured, and the feasibility checks), with one-line error messages for both (`messages.py`), and what it
minimises (`objectives.py`: the objectives, and each config's counted inference costs)."""

from .loading import default_space_path, load_space, space_error_message, space_from_dict
from .sampling import is_valid, suggest, to_configs, to_optuna_distributions
from .spec import (
    CANDIDATE,
    CANDIDATE_KNOBS,
    CONFIG_MODELS,
    KNOWN_FIELDS,
    SCHEDULE_FIELDS,
    CategoricalParam,
    FloatParam,
    IntParam,
    SearchSpace,
    SpaceError,
    cheapest_of,
    describe,
)

__all__ = [
    "CANDIDATE",
    "CANDIDATE_KNOBS",
    "CONFIG_MODELS",
    "KNOWN_FIELDS",
    "SCHEDULE_FIELDS",
    "CategoricalParam",
    "FloatParam",
    "IntParam",
    "SearchSpace",
    "SpaceError",
    "default_space_path",
    "describe",
    "is_valid",
    "load_space",
    "cheapest_of",
    "space_error_message",
    "space_from_dict",
    "suggest",
    "to_configs",
    "to_optuna_distributions",
]
