"""KV bytes per token as a search objective: the objectives a search may choose, what they change on its fronts
and in its promotion, what `nas search --objectives` accepts and stores, and the counted costs each trial, each
`nas show --wide` row and each export carries (`nas.space.objectives`)."""

from dataclasses import replace

import pytest
from typer.testing import CliRunner

from nas.answer.pareto import FrontPoint, pareto_rows
from nas.answer.promotion import Candidate, nondominated_fronts, promotable
from nas.answer.target import front_at_target
from nas.cli import app
from nas.cli.front_table import WIDE_COLUMNS, format_kv, front_report
from nas.export import inference_fields
from nas.search.settings import SearchSettings
from nas.search.study import DefineByRun
from nas.search.trainable import final_report, metric_keys
from nas.search_answer import search_answer
from nas.space import space_from_dict
from nas.space.budget import Budget
from nas.space.objectives import (
    DEFAULT_OBJECTIVES,
    Objective,
    front_costs,
    inference_cost_of,
    kv_bytes_of,
    objectives_of,
    parse_objectives,
)
from nas.store import Store, default_url
from search_spaces.residual_lm import ArchConfig
from search_spaces.residual_lm.decode_cost import decode_cost, kv_cache_bytes
from workers.status import TrialStatus
from workers.trial.contract import CountedCosts, TrialOutcome, Verdict
from workers.trial.result import TrialResult

KV = (Objective.LOSS, Objective.FLOPS, Objective.KV)
# Same executed FLOPs per token: the dense config has the lower loss, the routed one the smaller cache.
DENSE = ArchConfig(vocab_size=256, seq_len=64, n_layers=4, d_model=64, n_heads=2)
ROUTED = ArchConfig(vocab_size=256, seq_len=64, n_layers=4, d_model=64, n_heads=2, mod_rate=0.5, mod_every=1)


def row(number: int, loss: float, arch: ArchConfig, flops: float = 1e6):
    """A completed row carrying only what a front reads (the architecture as the store keeps it)."""
    point = FrontPoint(number, loss, flops, TrialStatus.COMPLETED)
    return _Row(**vars(point), config={"arch": arch.model_dump()})


class _Row:
    def __init__(self, **fields):
        self.__dict__.update(fields)


def test_objectives_are_the_two_accepted_sets_and_anything_else_names_them():
    assert parse_objectives("loss,flops") == DEFAULT_OBJECTIVES and parse_objectives(" loss, flops ,kv") == KV
    assert parse_objectives(["loss", "flops", "kv"]) == KV  # as the store keeps them
    for bad in ("loss", "loss,kv", "flops,loss", "loss,flops,kv,kv", "loss,flops,latency", ""):
        with pytest.raises(ValueError, match="must be loss,flops or loss,flops,kv"):
            parse_objectives(bad)
    assert objectives_of({}) == objectives_of(None) == DEFAULT_OBJECTIVES  # a search stored before the choice
    assert objectives_of({"objectives": ["loss", "flops", "kv"]}) == KV
    assert SearchSettings().objectives == DEFAULT_OBJECTIVES
    assert metric_keys(KV) == ["target_loss", "executed_flops_per_token", "kv_bytes_per_token"]


def test_kv_as_an_objective_puts_the_smaller_cache_on_the_front_at_equal_flops():
    """At equal FLOPs the lower loss dominates on (loss, flops); with KV bytes the smaller cache is a trade-off."""
    assert kv_bytes_of(row(0, 2.0, ROUTED)) < kv_bytes_of(row(0, 2.0, DENSE))
    rows = [row(0, 2.0, DENSE), row(1, 2.1, ROUTED)]
    assert [r.number for r in pareto_rows(rows)] == [0]
    key, also = front_costs(KV)
    assert sorted(r.number for r in pareto_rows(rows, key=key, also=also)) == [0, 1]
    assert [r.number for r in front_at_target(rows, {}, *front_costs(DEFAULT_OBJECTIVES))] == [0]
    # On the KV axis alone (the dashboard's choice) the routed config is on the front too.
    assert sorted(r.number for r in pareto_rows(rows, key=kv_bytes_of)) == [0, 1]


def test_promotion_keeps_the_smaller_cache_only_when_the_search_minimises_it():
    dense_kv, routed_kv = (kv_cache_bytes(c, c.seq_len) / c.seq_len for c in (DENSE, ROUTED))
    two = [Candidate(0, 2.0, 1e6), Candidate(1, 2.05, 1e6), Candidate(2, 2.1, 1e6), Candidate(3, 2.2, 1e6)]
    caches = (dense_kv, dense_kv, routed_kv, dense_kv)
    three = [replace(c, kv=kv) for c, kv in zip(two, caches, strict=True)]
    assert [[c.trial for c in f] for f in nondominated_fronts(two)] == [[0], [1], [2], [3]]
    assert [[c.trial for c in f] for f in nondominated_fronts(three)] == [[0, 2], [1], [3]]
    assert promotable(two, eta=2) == {0, 1}  # by loss alone at equal FLOPs
    assert promotable(three, eta=2) == {0, 2}  # the routed config's smaller cache earns it the next rung
    with pytest.raises(ValueError, match="same objectives"):
        nondominated_fronts([two[0], three[1]])


def test_each_trial_reports_and_stores_its_counted_costs_at_its_seq_len():
    space = space_from_dict(
        {"family": "residual_lm", "fixed": {"vocab_size": 256, "seq_len": 64, "d_model": 64, "n_heads": 2},
         "params": {"n_layers": {"int": {"low": 2, "high": 4}}}}
    )  # fmt: skip
    ticket = DefineByRun(space, Budget(trial_flops=1e10, min_tokens_per_param=None)).ticket(0, {"n_layers": 3})
    arch = ArchConfig(vocab_size=256, seq_len=64, d_model=64, n_heads=2, n_layers=3)
    assert ticket.costs.kv_bytes_per_token == kv_cache_bytes(arch, 64) / 64
    assert ticket.costs.decode_flops_per_token == decode_cost(arch, 64).flops_per_token
    result = TrialResult.untrained(TrialStatus.COMPLETED, "", 1e6, 0.0)
    report = final_report(TrialOutcome(0, replace(result, arch=arch), 2.0))
    assert report["kv_bytes_per_token"] == ticket.costs.kv_bytes_per_token and report["target_loss"] == 2.0
    assert final_report(TrialOutcome(0, result, 2.0))["kv_bytes_per_token"] == float("inf")  # no architecture


def test_the_store_keeps_a_trials_costs_and_show_wide_prints_them(tmp_path):
    cost = decode_cost(ROUTED, ROUTED.seq_len)
    with Store(default_url(tmp_path)) as store:
        settings = {"objectives": ["loss", "flops", "kv"]}
        budget = Budget(trial_flops=1e10, min_tokens_per_param=None).model_dump()
        store.create_search("s", requested_trials=1, budget=budget, space={}, settings=settings,
                            optuna_study_name=None, code_version=None)  # fmt: skip
        tid = store.start_trial("s", number=0, config={"n_layers": 4}, costs=CountedCosts(1e6, 123.0, 456.0))
        store.finish_trial(tid, replace(TrialResult.loss_only(2.0, 1e6), arch=ROUTED))
        rows = store.trials("s")
        assert objectives_of(store.get_search("s").settings) == KV
        table, lines = front_report(search_answer(store, "s"), wide=True)
    assert (rows[0].kv_bytes_per_token, rows[0].decode_flops_per_token) == (123.0, 456.0)  # as stored
    assert inference_cost_of(replace(rows[0], kv_bytes_per_token=None)).decode_flops_per_token == cost.flops_per_token
    assert format_kv(rows[0]) == "0.12K @64"
    assert "KV bytes/tok @ctx" in WIDE_COLUMNS and "decode FLOPs/tok" in WIDE_COLUMNS
    assert [c.header for c in table.columns] == list(WIDE_COLUMNS)
    assert any(line.startswith("objectives loss,flops,kv") for line in lines)


def test_the_export_field_is_the_counted_kv_bytes_of_the_config():
    fields = inference_fields(ROUTED)
    assert fields["kv_context"] == ROUTED.seq_len == 64
    assert fields["kv_bytes_per_token"] == kv_cache_bytes(ROUTED, 64) / 64
    assert fields["decode_flops_per_token"] == decode_cost(ROUTED, 64).flops_per_token


def test_nas_search_accepts_stores_and_refuses_objectives(tmp_path, monkeypatch):
    """`--objectives loss,flops,kv` is stored with the search (nothing trained here: the launch only records
    it); a bad value is one line naming the option and the accepted values, exit 2, nothing stored."""
    from nas.search import launch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(launch, "launch_search", lambda store, name, space, budget, settings, **_: (
        launch.create_search(store, name, space, budget, settings),
        launch.SearchReport(name, budget.n_trials, 0, "completed"),
    )[1])  # fmt: skip
    url = default_url(tmp_path)
    tiny = str(__import__("pathlib").Path(__file__).parents[1] / "data" / "tiny_space.yaml")
    base = ["search", "--trial-flops", "2e10", "--space", tiny, "--storage", url, "--no-progress"]
    runner = CliRunner()
    done = runner.invoke(app, [*base, "--name", "kv", "--objectives", "loss,flops,kv"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    bad = runner.invoke(app, [*base, "--name", "bad", "--objectives", "loss,latency"], catch_exceptions=False)
    assert bad.exit_code == 2
    assert bad.stderr.strip().splitlines() == [
        "error: --objectives: must be loss,flops or loss,flops,kv (got 'loss,latency')"
    ]
    with Store(url) as store:
        assert [s.name for s in store.list_searches()] == ["kv"]
        assert store.get_search("kv").settings["objectives"] == ["loss", "flops", "kv"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_real_search_minimises_kv_bytes_as_its_third_objective(tmp_path):
    """The smallest real search (2 trials, 2 rungs, no repeats) with `--objectives loss,flops,kv`: its Optuna
    study has three minimise directions, each completed trial told its counted KV bytes, which the store
    keeps and `nas show --wide` prints."""
    import optuna

    from nas.search.study import optuna_storage
    from searches import nas_args, run

    url = f"sqlite:///{tmp_path}/kv.db"
    args = nas_args("kv", url, trials=2, flops="5e8", rungs=2, eta=2, repeat_seeds=0)
    run([*args, "--objectives", "loss,flops,kv"], tmp_path)
    with Store(url) as store:
        rows = {r.number: r for r in store.trials("kv")}
        study = optuna.load_study(study_name=store.get_search("kv").optuna_study_name, storage=optuna_storage(url))
    assert study.directions == [optuna.study.StudyDirection.MINIMIZE] * 3
    told = [
        t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE and rows[t.number].status == "completed"
    ]
    assert told
    for t in told:
        arch = ArchConfig(**rows[t.number].config["arch"])
        assert t.values[2] == rows[t.number].kv_bytes_per_token == kv_cache_bytes(arch, arch.seq_len) / arch.seq_len
    wide = CliRunner().invoke(app, ["show", "kv", "--wide", "--storage", url])
    assert wide.exit_code == 0 and "KV bytes/tok @ctx" in wide.stdout and "objectives loss,flops,kv" in wide.stdout


def test_a_rung_decision_promotes_on_kv_bytes_only_when_the_search_minimises_them():
    """Four trials at rung 0 of two, equal FLOPs: the routed one (third by loss) climbs only with kv."""
    from nas.answer.rung_decision import PromotionRule, decide_rung
    from nas.store import RungRow

    routed_kv = kv_cache_bytes(ROUTED, ROUTED.seq_len) / ROUTED.seq_len
    dense_kv = kv_cache_bytes(DENSE, DENSE.seq_len) / DENSE.seq_len
    losses, caches = (2.0, 2.05, 2.1, 2.2), (dense_kv, dense_kv, routed_kv, dense_kv)
    rows = [
        RungRow(n, 0, 0, 1e10, 1, 1, loss, 1e10, 1.0, None, None, None, None, None, "cascaded", 1e6, kv)
        for n, (loss, kv) in enumerate(zip(losses, caches, strict=True))
    ]
    for objectives, climbs in ((DEFAULT_OBJECTIVES, False), (KV, True)):
        ladder = PromotionRule(1e11, 2.0, 2, noise_rule=False, objectives=objectives)
        assert (decide_rung(ladder, rows, 2, 0, 1e6).verdict == Verdict.CLIMB) is climbs
