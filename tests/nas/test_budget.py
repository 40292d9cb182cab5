"""Budgets: CLI-facing validation, number of trials, and whether a space or a config fits C."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from nas.space import cheapest_of, load_space, space_from_dict
from nas.space.budget import (
    DEFAULT_TRIALS,
    VALIDATED_TARGET_RATIO,
    Budget,
    BudgetError,
    budget_error_message,
    check_budget_fits,
    space_batch_size,
    stored_budget,
    tokens_per_param_at_target,
    trial_is_feasible,
)
from nas.space.sampling import to_configs
from nas.store.migrations import LEGACY_TARGET_RATIO
from search_spaces.residual_lm import ArchConfig, flops_per_token
from workers.ladder.plans import plan_budget

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def space():
    return load_space()


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"trial_flops": 0}, "--trial-flops: must be > 0 (got 0)"),
        ({"trial_flops": -1.0}, "--trial-flops: must be > 0 (got -1.0)"),
        ({"trial_flops": float("inf")}, "--trial-flops: must be a finite number"),
        ({"trial_flops": "lots"}, "--trial-flops: must be a number"),
        ({}, "--trial-flops: required"),
        (
            {"trial_flops": 2e12, "trials": 40, "search_flops": 8e13},
            "--trials / --search-flops: give one of them, not both",
        ),
        ({"trial_flops": 2e12, "search_flops": 1e12}, "--search-flops: 1e12 is below --trial-flops 2e12"),
        ({"trial_flops": 2e12, "search_flops": -5.0}, "--search-flops: must be > 0"),
        ({"trial_flops": 2e12, "trials": 0}, "--trials: must be >= 1 (got 0)"),
        ({"trial_flops": 2e12, "trials": 2.5}, "--trials: must be a whole number"),
        ({"trial_flops": 2e12, "max_trial_seconds": 0}, "--max-trial-seconds: must be > 0"),
        ({"trial_flops": 2e12, "max_search_seconds": -1}, "--max-search-seconds: must be > 0"),
        ({"trial_flops": 2e12, "workers": 2}, "--workers: unknown key"),
        ({"trial_flops": 2e12, "rungs": 0}, "--rungs: must be >= 1 (got 0)"),
        ({"trial_flops": 2e12, "rungs": 9}, "--rungs: must be <= 8 (got 9)"),
        ({"trial_flops": 2e12, "eta": 1.0}, "--eta: must be >= 1.5 (got 1.0)"),
        ({"trial_flops": 2e12, "target_flops": -1.0}, "--target-flops: must be > 0"),
        ({"trial_flops": 2e12, "target_flops": 4e12}, "--target-flops: 4e12 must be above the top rung 4e12"),
        ({"trial_flops": 2e12, "narrowing": {"min_width": 1}}, "--min-replica-width: must be >= 2 (got 1)"),
        ({"trial_flops": 2e12, "narrowing": {"min_share": 2}}, "--min-replica-share: must be <= 1 (got 2)"),
        ({"trial_flops": 2e12, "narrowing": {"keep": "width"}}, "--narrowing: "),
        ({"trial_flops": 2e12, "ladder_kind": "rope"}, "--ladder: "),
    ],
)
def test_bad_budgets_name_the_cli_option(kwargs, expected):
    with pytest.raises(BudgetError) as info:
        Budget(**kwargs)
    assert expected in str(info.value)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_model_validate_errors_format_the_same_way():
    with pytest.raises(ValidationError) as info:
        Budget.model_validate({"trial_flops": -1.0})
    assert budget_error_message(info.value) == "--trial-flops: must be > 0 (got -1.0)"
    assert budget_error_message(BudgetError("x")) == "x"


def test_number_of_trials():
    assert Budget(trial_flops=2e12).n_trials == DEFAULT_TRIALS == 20
    assert Budget(trial_flops=2e12, trials=40).n_trials == 40
    assert Budget(trial_flops=2e12, search_flops=8.5e13).n_trials == 42  # floor(42.5)
    assert Budget(trial_flops=2e12, search_flops=2e12).n_trials == 1
    assert Budget(trial_flops=2e12, search_flops=8e13).total_flops == 8e13
    b = Budget(trial_flops=2e12, search_flops=8e13)
    assert b.trials is None and b.search_flops == 8e13


def test_ladder_and_target_defaults():
    b = Budget(trial_flops=2e12)
    assert (b.rungs, b.eta, b.ladder.asked.rungs, b.ladder.asked.eta) == (2, 2.0, 2, 2.0)
    assert b.ladder.top_flops == pytest.approx(4e12)
    assert b.ladder.target_flops == pytest.approx(VALIDATED_TARGET_RATIO * 4e12) and b.ladder_kind == "replica"
    assert b.beyond_validated is None and b.ladder.target_ratio == pytest.approx(10.0)
    assert Budget(trial_flops=2e12, rungs=1).ladder.top_flops == 2e12
    assert Budget(trial_flops=2e12, rungs=2, eta=2, target_flops=5e12).ladder.target_flops == 5e12
    far = Budget(trial_flops=2e12, target_flops=2e15)
    assert far.beyond_validated.startswith("--target-flops 2e15 is 500x the top rung 4e12")
    old = stored_budget({"trial_flops": 2e12, "trials": 4})  # stored before budget ladders and replicas
    assert old.rungs == 1 and old.ladder_kind == "budget" and old.ladder.target_flops == LEGACY_TARGET_RATIO * 2e12
    assert stored_budget(b.model_dump()) == b


def test_budget_is_frozen():
    b = Budget(trial_flops=2e12)
    with pytest.raises(ValidationError):
        b.trial_flops = 1.0


def test_check_budget_fits_rejects_a_tiny_budget(space):
    with pytest.raises(BudgetError) as info:
        check_budget_fits(space, Budget(trial_flops=1e3), 16)
    message = str(info.value)
    assert message.startswith("--trial-flops 1e3 is below the cheapest config in the space (needs >= ")
    assert "n_layers=2 d_model=64" in message and "\n" not in message


def test_check_budget_fits_accepts_the_default_budget(space):
    plan = check_budget_fits(space, Budget(trial_flops=2e12), 16)
    assert plan.steps > 1000  # the cheapest config: ~1800 steps of 16 x 128 tokens
    assert check_budget_fits(space, Budget(trial_flops=2e12)).steps == plan.steps  # batch from the space


def test_check_budget_fits_boundary_is_one_step_of_the_cheapest_config(space):
    cheapest = cheapest_of(space)
    one_step = 3 * flops_per_token(cheapest).executed * 16 * cheapest.seq_len
    unbounded = {"min_tokens_per_param": None}  # at so small a target no config sees 4 tokens per parameter
    assert check_budget_fits(space, Budget(trial_flops=one_step, **unbounded), 16).steps == 1
    with pytest.raises(BudgetError, match="--trial-flops"):
        check_budget_fits(space, Budget(trial_flops=one_step * 0.99, **unbounded), 16)
    with pytest.raises(BudgetError, match="--trial-flops"):  # a bigger batch makes one step dearer
        check_budget_fits(space, Budget(trial_flops=one_step, **unbounded), 32)
    with pytest.raises(BudgetError, match="^--min-tokens-per-param 4: even the cheapest config"):
        check_budget_fits(space, Budget(trial_flops=one_step), 16)


def test_space_batch_size(space):
    assert space_batch_size(space) == 16
    searched = space_from_dict({"params": {"batch_size": {"categorical": [32, 8]}}})
    assert space_batch_size(searched) == 8
    assert space_batch_size(space_from_dict({"params": {"n_layers": {"int": {"low": 1, "high": 2}}}})) == 16


def test_trial_is_feasible():
    big = ArchConfig(n_layers=8, d_model=192, n_heads=4, mlp_ratio=4.0, residual="nag")
    assert trial_is_feasible(big, Budget(trial_flops=2e12, min_tokens_per_param=None), 16) is None
    reason = trial_is_feasible(big, Budget(trial_flops=1e10, ladder_kind="budget", min_tokens_per_param=None), 16)
    assert reason is not None and "one training step needs" in reason and "--trial-flops 1e10" in reason
    assert trial_is_feasible(big, 1e10, 16) == reason  # a plain number works too


LADDER3 = {"rungs": 3, "eta": 3.0}  # T = 90 x the lowest rung: the lowest replica is a ninth of the way up


def test_on_a_replica_ladder_the_lowest_rungs_replica_must_afford_a_step():
    big = ArchConfig(n_layers=8, d_model=192, n_heads=4, mlp_ratio=4.0, residual="nag")
    # one step of the config itself costs 3 F x 2048 tokens > 1e10; its narrowest replica (width 8) does not
    assert (
        trial_is_feasible(big, Budget(trial_flops=1e10, ladder_kind="budget", min_tokens_per_param=None, **LADDER3), 16)
        is not None
    )
    narrow = dict(narrowing={"keep": "heads", "min_share": 0.0})  # replicas as narrow as width 8
    assert trial_is_feasible(big, Budget(trial_flops=1e10, min_tokens_per_param=None, **narrow, **LADDER3), 16) is None
    reason = trial_is_feasible(big, Budget(trial_flops=1e7, min_tokens_per_param=None, **LADDER3), 16)
    assert reason is not None and reason.startswith("the lowest rung's replica cannot afford one step")
    # a floor at the config's own width leaves the lowest rung the config itself: no cheaper than a budget ladder
    floored = Budget(trial_flops=1e10, narrowing={"min_width": 192}, min_tokens_per_param=None, **LADDER3)
    assert trial_is_feasible(big, floored, 16) is not None and floored.narrowing.min_width == 192
    with pytest.raises(BudgetError, match=r"^--min-replica-width: must be >= 2 \(got 1\)$"):
        Budget(trial_flops=1e10, narrowing={"min_width": 1})


def test_configs_outside_the_tokens_per_parameter_range_at_the_target_are_not_trained():
    """D_T / N_T from the iso-FLOP token count at T (whole batches) over a real build's parameter count."""
    from search_spaces.residual_lm import build_model, count_parameters
    from workers.ladder.plans import plan_budget

    budget = Budget(trial_flops=1e11, min_tokens_per_param=4.0, max_tokens_per_param=100.0)
    for d, layers in [(64, 2), (64, 8), (192, 8), (32, 1)]:
        arch = ArchConfig(vocab_size=256, seq_len=128, n_layers=layers, d_model=d, n_heads=2)
        ratio = plan_budget(arch, budget.ladder.target_flops, 16).tokens / count_parameters(build_model(arch))
        reason = trial_is_feasible(arch, budget, 16)
        if ratio < 4.0:
            assert reason is not None and "below --min-tokens-per-param 4" in reason and f"{ratio:.3g}" in reason
        elif ratio > 100.0:
            assert reason is not None and "above --max-tokens-per-param 100" in reason
        else:
            assert reason is None, (d, layers, ratio)
    assert trial_is_feasible(ArchConfig(vocab_size=256, seq_len=128, n_layers=8, d_model=192, n_heads=2),
                             Budget(trial_flops=1e11, min_tokens_per_param=None), 16) is None  # fmt: skip
    assert stored_budget({"trial_flops": 1e11, "ladder": "replica"}).min_tokens_per_param is None  # stored before


def make_demo_options() -> dict[str, str]:
    """The `--option value` pairs `make demo` passes to `nas search` (the Makefile's `demo:` recipe)."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    return dict(re.findall(r"--([a-z-]+) (\S+)", recipe.replace("\\\n", " ")))


def short(flops: float) -> str:
    return f"{flops:.0e}".replace("e+", "e")  # 1e12, as the README writes it


def test_the_demo_space_and_the_readme_say_what_make_demo_runs():
    """space_demo.yaml's header: at `make demo`'s target every depth, width and MoD rate of the space is trained
    in some config, only wide, deep ones being refused; the README's account of the demo is the Makefile's."""
    options = make_demo_options()
    space = load_space(ROOT / options["space"])
    assert options["space"].endswith("space_demo.yaml")
    budget_fields = {k.replace("-", "_"): v for k, v in options.items() if k.replace("-", "_") in Budget.model_fields}
    budget = Budget(**budget_fields)
    batch = space_batch_size(space)
    any_value = {name: getattr(p, "choices", [getattr(p, "low", None)])[0] for name, p in space.params.items()}

    def trained(n_layers: int, d_model: int, mlp_ratio: float, mod_rate: float) -> bool:
        knobs = dict(n_layers=n_layers, d_model=d_model, mlp_ratio=mlp_ratio, mod_rate=mod_rate, residual="nag")
        arch, _, _ = to_configs(space, {**any_value, **knobs})  # nag: the fewest tokens per parameter of the families
        seen = tokens_per_param_at_target(arch, budget, batch)
        return seen is None or seen.reason is None

    depths = range(space.params["n_layers"].low, space.params["n_layers"].high + 1)
    widths, ratios, rates = (space.params[k].choices for k in ("d_model", "mlp_ratio", "mod_rate"))
    # Tokens per parameter at T fall with depth, width and MLP ratio, and rise with the MoD rate.
    assert all(trained(depth, min(widths), max(ratios), 0.0) for depth in depths)  # every depth, even dense
    assert all(trained(min(depths), width, min(ratios), 0.0) for width in widths)  # every width
    assert all(trained(min(depths), min(widths), min(ratios), rate) for rate in rates)  # every MoD rate
    assert not trained(max(depths), max(widths), max(ratios), 0.0)  # the widest deep ones are refused

    readme = " ".join((ROOT / "README.md").read_text().split())
    default_rungs = Budget.model_fields["rungs"].default
    assert f"It trains {options['trials']} trials, {options['workers']} at a time" in readme
    layout = budget.ladder.layout
    assert f"each once at the top rung of the default ladder ({short(layout.top_flops)} training FLOPs: " in readme
    assert f"{default_rungs} replica rungs at eta {budget.eta:g} would cost as much" in readme and layout.rungs == 1
    assert f"at the target T = {short(budget.ladder.target_flops)} ({VALIDATED_TARGET_RATIO:g}x the top rung)" in readme


def test_the_default_space_header_counts_the_steps_of_its_largest_and_cheapest_configs(space):
    """space.yaml's header: at its `--trial-flops` the largest config gets ~N steps of batch x seq_len tokens
    and the cheapest ~M steps (within 15%: the header rounds)."""
    header = " ".join(
        line.lstrip("# ")
        for line in (ROOT / "search_spaces/residual_lm/space.yaml").read_text().splitlines()
        if line.startswith("#")
    )
    flops = float(re.search(r"`--trial-flops (\S+)`", header)[1])
    largest_steps, batch, seq_len, cheapest_steps = map(
        int, re.search(r"~(\d+) steps of (\d+) x (\d+) tokens.*?~(\d+) steps", header).groups()
    )
    assert (batch, seq_len) == (space_batch_size(space), space.fixed["seq_len"])
    any_value = {name: getattr(p, "choices", [getattr(p, "low", None)])[0] for name, p in space.params.items()}
    largest = {"n_layers": space.params["n_layers"].high, "d_model": max(space.params["d_model"].choices),
               "mlp_ratio": max(space.params["mlp_ratio"].choices), "mod_rate": 0.0}  # fmt: skip
    arch, _, _ = to_configs(space, {**any_value, **largest})
    assert plan_budget(arch, flops, batch).steps == pytest.approx(largest_steps, rel=0.15)
    assert plan_budget(cheapest_of(space), flops, batch).steps == pytest.approx(cheapest_steps, rel=0.15)


def test_the_narrowing_is_a_stored_setting_and_a_search_stored_before_it_keeps_the_head_count():
    from workers.ladder.narrowing import KEEP_HEADS, Narrowing

    budget = Budget(trial_flops=1e10, **LADDER3)
    assert budget.narrowing == Narrowing() and budget.narrowing.keep == "head_size"
    assert budget.ladder.trial_plan.narrowing == budget.narrowing
    assert stored_budget(budget.model_dump()) == budget  # what a search stores is what it resumes with
    heads = Budget(trial_flops=1e10, narrowing={"keep": "heads", "min_share": 0.0}, **LADDER3)
    assert stored_budget(heads.model_dump()).ladder.trial_plan.narrowing == KEEP_HEADS
    legacy = {k: v for k, v in budget.model_dump().items() if k != "narrowing"}
    assert stored_budget(legacy).narrowing == KEEP_HEADS
    flat = {**legacy, "ladder": "replica", "narrowing": "heads", "min_replica_width": 8, "min_replica_share": 0.0}
    assert stored_budget({k: v for k, v in flat.items() if k != "ladder_kind"}).narrowing == KEEP_HEADS
    with pytest.raises(BudgetError, match=r"^--narrowing: "):
        Budget(trial_flops=1e10, narrowing={"keep": "width"})


def test_a_search_measures_on_the_layout_it_chose_and_a_ladder_asked_for_is_kept():
    chosen = Budget(trial_flops=1e10).ladder.trial_plan  # 2 replica rungs at eta 2 save nothing: the top rung alone
    assert chosen.replica_flops == (2e10,) and chosen.spacing is not None and chosen.rungs == 1
    assert chosen.top_flops == 2e10 == Budget(trial_flops=1e10).ladder.top_flops
    asked = Budget(trial_flops=1e10, layout="as_given").ladder.trial_plan
    assert asked.replica_flops == (1e10, 2e10) and asked.spacing is not None and asked.rungs == 2
    saving = Budget(trial_flops=1e10, rungs=3, eta=3.0).ladder.trial_plan  # 3 x C against 9 x C: promotion pays
    assert saving.replica_flops == pytest.approx((1e10, 3e10, 9e10))
    assert Budget(trial_flops=1e10, ladder_kind="budget").ladder.trial_plan.rungs == 2  # one run passes every rung
    assert "no less" in Budget(trial_flops=1e10).ladder.layout.reason
