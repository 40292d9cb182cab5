"""Search spaces: the shipped default, sampling with Optuna samplers, configs, errors, smallest config."""

from __future__ import annotations

import itertools
import math

import optuna
import pytest
from pydantic import ValidationError

from nas.space import (
    CategoricalParam,
    FloatParam,
    IntParam,
    SearchSpace,
    SpaceError,
    cheapest_of,
    default_space_path,
    is_valid,
    load_space,
    space_from_dict,
    suggest,
    to_configs,
    to_optuna_distributions,
)
from search_spaces.residual_lm import ArchConfig, flops_per_token

optuna.logging.set_verbosity(optuna.logging.WARNING)

KNOBS = [
    "n_layers",
    "d_model",
    "n_heads",
    "mlp_ratio",
    "residual",
    "ancre_tau",
    "mod_rate",
    "mod_every",
    "mod_granularity",
    "lr",
    "warmup",
    "weight_decay",
]


@pytest.fixture(scope="module")
def space() -> SearchSpace:
    return load_space()


def fake_objectives(space: SearchSpace, params: dict) -> list[float]:
    """(a deterministic 'loss', executed FLOPs per token): enough for samplers to use the history."""
    arch, optim, _ = to_configs(space, params)
    loss = abs(math.log(optim.lr / 3e-3)) + 1.0 / arch.n_layers + 64 / arch.d_model + (arch.residual == "nag") * 0.1
    return [loss, flops_per_token(arch).executed]


def run_study(space: SearchSpace, sampler: optuna.samplers.BaseSampler, n: int) -> tuple[optuna.Study, list[dict]]:
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)  # in-memory storage
    sampled = []
    for _ in range(n):
        trial = study.ask()
        params = suggest(space, trial)
        sampled.append(params)
        study.tell(trial, fake_objectives(space, params))
    return study, sampled


# --- the shipped space -------------------------------------------------------------------------


def test_shipped_space_loads_with_the_documented_knobs(space):
    assert default_space_path().name == "space.yaml" and default_space_path().is_file()
    assert space.family == "residual_lm"
    assert list(space.params) == KNOBS  # sampling order = file order
    assert space.fixed["vocab_size"] == 256 and space.fixed["seq_len"] == 128 and space.fixed["batch_size"] == 16
    assert space.params["n_layers"] == IntParam(low=2, high=8)
    assert space.params["d_model"] == CategoricalParam(choices=(64, 96, 128, 192))
    assert space.params["residual"].choices == ("cascaded", "nag", "ancre")
    assert space.params["ancre_tau"] == FloatParam(low=1e-3, high=0.1, log=True)
    assert space.params["lr"] == FloatParam(low=3e-4, high=1e-2, log=True)


def test_shipped_completep_space_differs_from_the_default_only_in_parametrization_and_rate(space):
    """space_completep.yaml is the default space under completep with a narrow rate range; nothing else drifts."""
    completep = load_space(default_space_path().with_name("space_completep.yaml"))
    option = ("parametrization", "base_width", "base_depth", "horizon_tokens", "horizon_exponents", "horizon_span")
    assert {k: v for k, v in completep.fixed.items() if k not in option} == space.fixed
    assert completep.fixed["parametrization"] == "completep"
    same = lambda params: {k: v for k, v in params.items() if k != "lr"}  # noqa: E731
    assert same(completep.params) == same(space.params)
    narrow, wide = completep.params["lr"], space.params["lr"]
    assert narrow.high / narrow.low < wide.high / wide.low / 4
    arch, _, _ = to_configs(completep, suggest(completep, optuna.create_study().ask()))
    assert arch.parametrization == "completep" and (arch.base_width, arch.base_depth) == (64, 4)


def test_spec_round_trips(space):
    assert SearchSpace.model_validate(space.spec()) == space


def test_distributions_match_the_spec(space):
    dists = to_optuna_distributions(space)
    assert list(dists) == KNOBS
    assert dists["n_layers"] == optuna.distributions.IntDistribution(2, 8)
    assert dists["lr"] == optuna.distributions.FloatDistribution(3e-4, 1e-2, log=True)
    assert dists["residual"] == optuna.distributions.CategoricalDistribution(["cascaded", "nag", "ancre"])


# --- sampling ------------------------------------------------------------------------------------


def check_samples(space: SearchSpace, sampled: list[dict]) -> None:
    dists = to_optuna_distributions(space)
    for params in sampled:
        assert list(params) == KNOBS  # every knob, every trial, same order (ancre_tau and mod_every included)
        for name, value in params.items():
            assert dists[name]._contains(dists[name].to_internal_repr(value)), (name, value)
        assert is_valid(space, params) is None


@pytest.mark.parametrize(
    "make_sampler",
    [
        lambda: optuna.samplers.TPESampler(multivariate=True, seed=0),
        lambda: optuna.samplers.RandomSampler(seed=0),
    ],
    ids=["tpe-multivariate", "random"],
)
def test_suggest_samples_every_knob_on_50_trials(space, make_sampler):
    study, sampled = run_study(space, make_sampler(), 50)
    check_samples(space, sampled)
    assert len({p["residual"] for p in sampled}) == 3  # the samplers do explore
    # The space is the same on every trial: what GPSampler (and TPE multivariate) needs.
    # A knob sampled only when relevant (ancre_tau if residual == ancre) would drop out of this
    # intersection, and GPSampler would then sample it independently of the model.
    assert optuna.search_space.intersection_search_space(study.get_trials()) == to_optuna_distributions(space)


def test_suggest_with_gp_sampler(space, caplog):
    pytest.importorskip(
        "scipy",
        reason="GPSampler needs scipy, which is not installed here "
        "(torch is); the static-space property it needs is tested above",
    )
    # 15 asks, 10 of them guided by the GP (each fits a model: the full 50 take ~40 s on a loaded CPU).
    optuna.logging.enable_propagation()
    try:
        with caplog.at_level("WARNING", logger="optuna"):
            _, sampled = run_study(space, optuna.samplers.GPSampler(seed=0, n_startup_trials=5), 15)
    finally:
        optuna.logging.disable_propagation()
    check_samples(space, sampled)
    # GPSampler logs "... is sampled independently ..." for any knob outside its (intersection) space.
    assert "independent" not in caplog.text


def test_conditional_sampling_would_hide_knobs_from_gp(space):
    """Why suggest() samples every knob: sampling ancre_tau only for ANCRe trials drops it from the
    intersection search space that GPSampler models (it would then be sampled at random)."""

    def conditional(trial):
        residual = trial.suggest_categorical("residual", ["cascaded", "nag", "ancre"])
        if residual == "ancre":
            trial.suggest_float("ancre_tau", 1e-3, 0.1, log=True)
        return 0.0

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(conditional, n_trials=10)
    assert "ancre_tau" not in optuna.search_space.intersection_search_space(study.get_trials())
    full, _ = run_study(space, optuna.samplers.RandomSampler(seed=0), 10)
    assert "ancre_tau" in optuna.search_space.intersection_search_space(full.get_trials())


def test_same_seed_same_sequence(space):
    _, first = run_study(space, optuna.samplers.TPESampler(multivariate=True, seed=0), 20)
    _, again = run_study(space, optuna.samplers.TPESampler(multivariate=True, seed=0), 20)
    _, other = run_study(space, optuna.samplers.TPESampler(multivariate=True, seed=1), 20)
    assert first == again
    assert first != other


def test_suggest_returns_what_the_trial_recorded(space):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    trial = study.ask()
    params = suggest(space, trial)
    assert params == trial.params


# --- configs -------------------------------------------------------------------------------------

VALID = dict(
    n_layers=3,
    d_model=96,
    n_heads=4,
    mlp_ratio=2.6667,
    residual="ancre",
    ancre_tau=0.01,
    mod_rate=0.25,
    mod_every=2,
    mod_granularity="sublayer",
    lr=3e-3,
    warmup=0.1,
    weight_decay=0.1,
)


def test_to_configs_merges_fixed_and_sampled(space):
    arch, optim, run = to_configs(space, VALID)
    assert (arch.n_layers, arch.d_model, arch.head_dim, arch.residual, arch.mod_rate) == (3, 96, 24, "ancre", 0.25)
    assert (arch.vocab_size, arch.seq_len) == (256, 128)  # fixed
    assert (optim.lr, optim.warmup, optim.weight_decay) == (3e-3, 0.1, 0.1)
    assert run.batch_size == 16
    assert is_valid(space, VALID) is None


@pytest.mark.parametrize(
    "override, field",
    [
        ({"d_model": 100}, "even"),  # head_dim 25: RoPE rotates pairs
        ({"d_model": 90}, "divisible"),  # 90 / 4
        ({"mod_rate": 0.95}, "mod_rate"),
        ({"residual": "highway"}, "residual"),
        ({"lr": -1.0}, "lr"),
        ({"batch_size": 8}, "batch_size"),  # fixed in this space, not searched
        ({"colour": "red"}, "colour"),
    ],
)
def test_invalid_combinations_are_reported(space, override, field):
    params = {**VALID, **override}
    reason = is_valid(space, params)
    assert reason is not None and field in reason and "\n" not in reason
    with pytest.raises(ValidationError):
        to_configs(space, params)


def test_missing_knob_is_reported(space):
    params = {k: v for k, v in VALID.items() if k != "lr"}
    assert "lr" in is_valid(space, params)


# --- malformed specs -----------------------------------------------------------------------------

BASE = """\
family: residual_lm
fixed:
  seq_len: 128
params:
  n_layers: {int: {low: 2, high: 8}}
  d_model: {categorical: [64, 128]}
  ancre_tau: {float: {low: 0.001, high: 0.1, log: true}}
  residual: {categorical: [cascaded, nag]}
"""

MALFORMED = [
    ("unknown-name", BASE + "  colour: {categorical: [red]}\n", "params.colour: unknown searched field"),
    ("unknown-fixed", BASE.replace("seq_len: 128", "seq_length: 128"), "fixed.seq_length: unknown fixed field"),
    ("low>=high", BASE.replace("low: 2, high: 8", "low: 8, high: 2"), "params.n_layers.high: must be > low"),
    ("low==high", BASE.replace("low: 2, high: 8", "low: 4, high: 4"), "params.n_layers.high: must be > low"),
    (
        "log-low-0",
        BASE.replace("low: 0.001", "low: 0.0"),
        "params.ancre_tau.low: must be > 0 for a log scale (got 0.0)",
    ),
    ("log-low-neg", BASE.replace("low: 0.001", "low: -0.1"), "params.ancre_tau.low: must be > 0 for a log scale"),
    ("empty-categorical", BASE.replace("[64, 128]", "[]"), "params.d_model.categorical: must not be empty"),
    (
        "unknown-residual",
        BASE.replace("[cascaded, nag]", "[cascaded, highway]"),
        "params.residual.categorical[1]: residual: Input should be 'cascaded', 'nag' or 'ancre'",
    ),
    ("fixed-and-searched", BASE.replace("seq_len: 128", "n_layers: 4"), "params.n_layers: n_layers is also in fixed"),
    ("out-of-range", BASE.replace("low: 2, high: 8", "low: 0, high: 8"), "params.n_layers.low: n_layers: must be >= 1"),
    ("bad-fixed", BASE.replace("seq_len: 128", "seq_len: 0"), "fixed.seq_len: seq_len: must be >= 1"),
    (
        "float-for-int",
        BASE.replace("{int: {low: 2, high: 8}}", "{float: {low: 2.0, high: 8.0}}"),
        "params.n_layers: n_layers is a whole number",
    ),
    ("bad-entry", BASE.replace("{int: {low: 2, high: 8}}", "{range: [2, 8]}"), "params.n_layers: must be one of"),
    (
        "unknown-key",
        BASE.replace("low: 2, high: 8", "low: 2, high: 8, stride: 2"),
        "params.n_layers.stride: unknown key; accepted: low, high, step, log",
    ),
    ("duplicate-choice", BASE.replace("[64, 128]", "[64, 64]"), "params.d_model.categorical: choices must be distinct"),
    (
        "no-valid-arch",
        BASE.replace("[64, 128]", "[100]") + "  n_heads: {categorical: [4]}\n",
        "params: no valid architecture in the space",
    ),
    ("family", BASE.replace("family: residual_lm", "family: cnn"), "family: Input should be 'residual_lm'"),
    ("top-level-key", BASE + "budget: 3\n", "budget: unknown key; accepted: family, fixed, params"),
    ("bad-indentation", BASE.replace("  d_model:", "   d_model:"), "space.yaml:6:"),
    ("duplicate-key", BASE + "  n_layers: {int: {low: 1, high: 2}}\n", "space.yaml:9:3: invalid YAML: duplicate key"),
    ("not-a-mapping", "- n_layers\n", "must be a mapping with keys family, fixed, params"),
]


@pytest.mark.parametrize("text, expected", [(t, e) for _, t, e in MALFORMED], ids=[i for i, _, _ in MALFORMED])
def test_malformed_spec_gives_one_line_naming_file_and_field(tmp_path, text, expected):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(SpaceError) as info:
        load_space(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert expected in message, message
    assert "\n" not in message


def test_base_spec_is_valid(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(BASE)
    assert list(load_space(path).params) == ["n_layers", "d_model", "ancre_tau", "residual"]


def test_malformed_yaml_names_the_line(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(BASE.replace("  d_model:", "   d_model:"))
    with pytest.raises(SpaceError, match=r"space\.yaml:6:\d+: invalid YAML"):
        load_space(path)


def test_missing_file(tmp_path):
    with pytest.raises(SpaceError, match=r"nope\.yaml: no such file"):
        load_space(tmp_path / "nope.yaml")


def test_yaml_exponent_without_dot_still_reads_as_a_number(tmp_path):
    # PyYAML reads `1e-3` as a string; the spec coerces it through the field's own type.
    path = tmp_path / "space.yaml"
    path.write_text(BASE.replace("low: 0.001", "low: 1e-3") + "  lr: {categorical: [1e-3, 3e-3]}\n")
    loaded = load_space(path)
    assert loaded.params["ancre_tau"].low == 1e-3
    assert loaded.params["lr"].choices == (1e-3, 3e-3)


def test_param_models_validate_on_their_own():
    with pytest.raises(ValidationError, match="must be > 0 for a log scale"):
        FloatParam(low=0.0, high=1.0, log=True)
    with pytest.raises(ValidationError, match="must be 1 for a log scale"):
        IntParam(low=1, high=9, step=2, log=True)
    with pytest.raises(ValidationError):
        CategoricalParam(choices=())


# --- the cheapest configuration ------------------------------------------------------------------


def executed(cfg: ArchConfig) -> float:
    return flops_per_token(cfg).executed


def brute_force_min(space: SearchSpace) -> float:
    """Cheapest valid config by walking the whole grid (floats at both ends)."""
    arch = {k: p for k, p in space.params.items() if k in ArchConfig.model_fields}
    grids = {
        k: (
            p.values() if isinstance(p, IntParam) else [p.low, p.high] if isinstance(p, FloatParam) else list(p.choices)
        )
        for k, p in arch.items()
    }
    fixed = {k: v for k, v in space.fixed.items() if k in ArchConfig.model_fields}
    best = math.inf
    for combo in itertools.product(*grids.values()):
        try:
            cfg = ArchConfig(**fixed, **dict(zip(grids, combo, strict=False)))
        except ValidationError:
            continue
        best = min(best, executed(cfg))
    return best


def test_cheapest_of_of_the_shipped_space(space):
    cfg = cheapest_of(space)
    assert (cfg.n_layers, cfg.d_model, cfg.mlp_ratio, cfg.residual, cfg.mod_rate, cfg.mod_every) == (
        2,
        64,
        2.0,
        "cascaded",
        0.875,
        1,
    )
    assert cfg.mod_granularity == "block"  # one router per block: fewer router FLOPs
    assert executed(cfg) == brute_force_min(space)  # all 4032 grid points (ancre_tau is FLOP-free)


def test_cheapest_of_is_no_costlier_than_200_random_samples(space):
    cheapest = executed(cheapest_of(space))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(200):
        params = suggest(space, study.ask())
        assert is_valid(space, params) is None
        assert cheapest <= executed(to_configs(space, params)[0])


@pytest.mark.parametrize(
    "params",
    [
        # the narrowest width has no valid head count: the next width is taken
        {"d_model": {"categorical": [36, 40, 64]}, "n_heads": {"categorical": [4]}},
        # NAG pays its gate; MoD routing as an int range and a float range
        {
            "residual": {"categorical": ["nag", "ancre"]},
            "mod_rate": {"float": {"low": 0.0, "high": 0.6}},
            "mod_every": {"int": {"low": 1, "high": 4}},
            "d_model": {"int": {"low": 32, "high": 96, "step": 32}},
        },
        # dense only, heads searched as an int range
        {
            "n_layers": {"int": {"low": 3, "high": 5}},
            "d_model": {"categorical": [48, 24]},
            "n_heads": {"int": {"low": 1, "high": 6}},
            "mlp_ratio": {"float": {"low": 1.5, "high": 3.0}},
        },
    ],
)
def test_cheapest_of_matches_brute_force_on_other_spaces(params):
    space = space_from_dict({"fixed": {"seq_len": 32, "vocab_size": 64}, "params": params})
    cfg = cheapest_of(space)
    assert executed(cfg) == brute_force_min(space)
    assert is_valid(space, {k: getattr(cfg, k) for k in params}) is None


def test_fixed_knobs_are_used(space):
    spec = space.spec()
    spec["fixed"]["n_heads"] = 4
    spec["params"].pop("n_heads")
    cfg = cheapest_of(space_from_dict(spec))
    assert cfg.n_heads == 4 and cfg.d_model == 64 and cfg.seq_len == 128


def test_a_trial_of_the_completep_space_runs_under_the_horizon_rule(space):
    """The sampled rate is the rate at the rule's horizon: a NAG trial half as long runs faster, one longer
    than the span the exponent was measured on at the sampled rate; cascaded and ANCRe (beta 0) at the
    sampled rate. The default space has no rule."""
    completep = load_space(default_space_path().with_name("space_completep.yaml"))
    _, optim, _ = to_configs(completep, suggest(completep, optuna.create_study().ask()))
    assert optim.horizon_tokens is not None and optim.horizon_span is not None
    shorter = optim.horizon_tokens // 2
    assert optim.at_horizon("nag", shorter).lr > optim.lr
    assert optim.at_horizon("nag", 10 * optim.horizon_span[1]).lr == optim.lr
    assert optim.at_horizon("cascaded", shorter).lr == optim.at_horizon("ancre", shorter).lr == optim.lr
    _, default_optim, _ = to_configs(space, suggest(space, optuna.create_study().ask()))
    assert default_optim.horizon_tokens is None
