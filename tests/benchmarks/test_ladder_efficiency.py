"""benchmarks/trust/ladder_efficiency.py on a small synthetic table: compute accounting, scores, proposers, outputs."""

import csv
import itertools
import json
import math
from pathlib import Path

import pytest

from helpers import import_benchmark

RUNGS, TARGET = (3e10, 9e10, 2.7e11), 2.7e12
ARCHS = [(2, 32), (4, 32), (2, 64)]  # (n_layers, d_model); (4, 64) is missing, as (6, 96) is in the real table


@pytest.fixture(scope="module")
def le():
    return import_benchmark("ladder_efficiency")


def _loss(amplitude: float, flops: float) -> float:
    return 1.5 + amplitude * (flops / 1e10) ** -0.3


def write_table(path: Path, columns: list[str]) -> Path:
    """9 configs (3 families x ARCHS) with power-law curves whose order changes between rung 0 and T."""
    rows = []
    for config, (family, (depth, width)) in enumerate(itertools.product(("cascaded", "nag", "ancre"), ARCHS)):
        fpt = 2.0e4 * depth * width / 32
        amp = 1.0 + 0.05 * config - 0.25 * (depth == 4)  # deeper: worse early, better late
        base = dict(config=config, residual=family, n_layers=depth, d_model=width, mod_rate=0.0, params=int(1000 * fpt))
        base.update(executed_flops_per_token=fpt, tokens=1, wall_time_s=1.0, status="completed")
        for seed, (rung, budget) in itertools.product((0, 1), enumerate(RUNGS)):
            loss = (1.0 + 0.02 * seed) * _loss(amp, budget) + 0.3 * (depth == 4) * (1 - rung / 2)
            rows.append({**base, "kind": "ladder", "seed": seed, "rung": rung, "budget_flops": budget})
            rows[-1].update(val_loss=loss, compute_flops=RUNGS[-1] + 0.2 * sum(RUNGS[:-1]))  # the full ladder
        rows.append({**base, "kind": "truth", "seed": 0, "rung": 0, "budget_flops": TARGET})
        rows[-1].update(val_loss=_loss(amp, TARGET), compute_flops=TARGET)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_replica_table(path: Path, columns: list[str]) -> Path:
    """The 9 configs' replica rungs at every share of T the real table holds (both seeds), curves crossing as on
    the ladder."""
    rows = []
    for config, (family, (depth, width)) in enumerate(itertools.product(("cascaded", "nag", "ancre"), ARCHS)):
        fpt = 2.0e4 * depth * width / 32
        amp = 1.0 + 0.05 * config - 0.25 * (depth == 4)
        for seed, (rung, budget) in itertools.product((0, 1), enumerate(REPLICA_RUNGS)):
            rows.append(
                dict(config=config, residual=family, n_layers=depth, d_model=width, mod_rate=0.0, params=1000)
                | dict(executed_flops_per_token=fpt, kind="replica", seed=seed, rung=rung, budget_flops=budget)
                | dict(
                    tokens=1, val_loss=(1.0 + 0.02 * seed) * _loss(amp, budget) + 0.1 * (depth == 4) * (4 - rung) / 2
                )
                | dict(compute_flops=budget, wall_time_s=1.0, status="completed", replica_d_model=width // 2)
                | dict(replica_params=250, tokens_per_param=20.0, target_tokens_per_param=20.0, on_path=True)
            )
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_a_config_still_being_built_is_left_out_of_the_table(le, tmp_path):
    """A build appends a config's rows job by job: a config with its ladder rows but no truth yet, and one with
    part of its replica rows, are left out; the table is the one without them."""
    from benchmarks.trust.fidelity_tables import COLUMNS, REPLICA_COLUMNS

    runs, replicas = (
        write_table(tmp_path / "runs.csv", COLUMNS),
        write_replica_table(tmp_path / "r.csv", REPLICA_COLUMNS),
    )
    whole = le.load(runs, replicas)
    with runs.open() as f:
        rows = list(csv.DictReader(f))
    with runs.open("a", newline="") as f:  # config 9: ladder rows only; config 4's replica rows: seed 0 only
        csv.DictWriter(f, fieldnames=COLUMNS).writerows({**r, "config": 9} for r in rows if r["kind"] == "ladder")
    with replicas.open() as f:
        kept = [r for r in csv.DictReader(f) if r["config"] != "4" or r["seed"] == "0"]
    with replicas.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=REPLICA_COLUMNS)
        writer.writeheader()
        writer.writerows(kept)
    partial = le.load(runs, replicas)
    assert set(partial.truth) == set(whole.truth) - {4}
    assert partial.ladder_rows == tuple(r for r in whole.ladder_rows if r["config"] != 4)
    assert {r["config"] for r in partial.replica_rows} == set(partial.truth)


def _replica_rungs() -> tuple[float, ...]:
    from benchmarks.trust.fidelity_tables import KEEP_HEADS_SHARES

    return tuple(TARGET * share for share in sorted(KEEP_HEADS_SHARES))  # every budget the real table holds


REPLICA_RUNGS = _replica_rungs()


@pytest.fixture
def table(le, tmp_path):
    from benchmarks.trust.fidelity_tables import COLUMNS, REPLICA_COLUMNS

    runs = write_table(tmp_path / "runs.csv", COLUMNS)
    return le.load(runs, write_replica_table(tmp_path / "replicas.csv", REPLICA_COLUMNS))


def test_the_replica_ladder_spends_exactly_the_runs_its_decider_had_trained(le, table):
    """Each rung is its own run: the compute is that of every rung row the search stored (a rung measured again
    with a second seed included); the first arrival climbs every rung; plain MO-ASHA measures nothing twice."""
    for name, noise_rule in (("replica", True), ("replica_without_noise_rule", False)):
        replica = le.make_strategy(name, table)
        spent = sum(replica.propose(config) for config in table.configs)
        stored = replica.store.rungs("replay")
        assert spent == pytest.approx(sum(r.training_flops for r in stored), rel=1e-12)
        assert replica.reached()[table.configs[0]] == len(table.replica_budgets)
        assert {r.seed for r in stored} == ({0, 1000} if noise_rule else {0})  # the noise is measured first
        replica.close()


def test_the_ladder_spends_exactly_the_cost_of_the_rungs_each_config_reached(le, table):
    from benchmarks.trust.fidelity_tables import ETA
    from benchmarks.trust.replay import SearchReplay

    ladder = SearchReplay(
        table.ladder_rows, table.budgets, ETA, table.target, replica=False, cooldown=le.COOLDOWN, noise_rule=False
    )
    order = [4, 0, 7, 2, 8, 1, 3, 6, 5]
    spent = sum(ladder.propose(config) for config in order)
    reached = [ladder.reached()[c] for c in order]
    assert reached[0] == len(RUNGS)  # alone at every rung, the first arrival always climbs
    assert 1 in reached  # and some stop early: the ladder is cheaper than training all at the top
    costs = {1: RUNGS[0], 2: RUNGS[1] + 0.2 * RUNGS[0], 3: RUNGS[2] + 0.2 * (RUNGS[0] + RUNGS[1])}
    assert spent == pytest.approx(sum(costs[k] for k in reached), rel=1e-12)
    ladder.close()
    assert le.table_facts(table, le.Scorer(table))["full_ladder_cost_over_measured"] == pytest.approx(1.0)


def test_replayed_compute_is_cumulative_and_single_budgets_cost_their_budget(le, table):
    scorer = le.Scorer(table)
    for strategy, budget in (("rung0", RUNGS[0]), ("top_rung", RUNGS[-1]), ("target", TARGET)):
        run = le.replay(table, scorer, "random", strategy, seed=1, max_asks=100)
        assert run["compute"] == pytest.approx([budget * k for k in range(1, 10)])
    run = le.replay(table, scorer, "random", "ladder", seed=1, max_asks=100)
    steps = [b - a for a, b in zip([0.0, *run["compute"]], run["compute"], strict=False)]
    top_rungs = [_rung_of(table, step) for step in steps]  # each proposal costs one rung cost, no more
    assert run["configs_per_rung"][0] == 9 and sum(run["configs_per_rung"]) == sum(r + 1 for r in top_rungs)


def _rung_of(table, cost: float) -> int:
    """The rung whose stopping cost is `cost` (StopIteration if none is)."""
    return next(r for r in range(len(RUNGS)) if math.isclose(table.rung_cost(r), cost, rel_tol=1e-9))


def test_scores_are_one_on_the_true_front_and_match_the_grading_hv_ratio(le, table, tmp_path):
    from benchmarks.harness import read_table
    from benchmarks.trust.fidelity_tables import COLUMNS
    from benchmarks.trust.grading import Truth, hv_ratio

    scorer = le.Scorer(table)
    true_front = le.front(table.truth, table.flops)
    assert scorer(true_front) == {"hv_ratio": 1.0, "hv_ratio_nadir": 1.0, "regret": 0.0}
    assert scorer(list(table.truth)) == scorer(true_front)  # dominated configs add nothing
    partial = scorer(true_front[:-1])
    assert partial["hv_ratio"] < 1 and partial["hv_ratio_nadir"] < partial["hv_ratio"]  # nadir: a stricter axis
    estimates = {c: v[0] for c, v in table.rung_loss.items()}  # rank by rung 0: a different front
    chosen = scorer(le.front(estimates, table.flops))["hv_ratio_nadir"]
    truth = Truth.of(read_table(write_table(tmp_path / "again.csv", COLUMNS)))
    assert chosen == pytest.approx(hv_ratio(estimates, truth), rel=1e-12) and chosen < 1
    run = le.replay(table, scorer, "random", "target", seed=0, max_asks=100)
    assert run["hv_ratio"][-1] == 1.0 and run["regret"][-1] == 0.0


def test_a_strategy_at_a_compute_is_its_state_after_the_last_affordable_proposal(le):
    run = {"compute": [1.0, 3.0, 6.0], "hv_ratio": [0.2, 0.5, 0.9], "regret": [0.3, 0.1, 0.0]}
    assert [le.at_compute(run, "hv_ratio", b) for b in (0.5, 1.0, 5.9, 6.0, 1e9)] == [0.0, 0.2, 0.5, 0.9, 0.9]
    assert math.isnan(le.at_compute(run, "regret", 0.5))
    assert le.compute_to(run, "hv_ratio", 0.5) == 3.0 and le.compute_to(run, "hv_ratio", 0.95) is None
    dips = {"compute": [1.0, 3.0, 6.0], "hv_ratio": [0.96, 0.5, 0.97]}  # a front that loses a member, then regains
    assert le.compute_to(dips, "hv_ratio", 0.95) == 6.0 and le.compute_to(dips, "hv_ratio", 0.4) == 1.0
    assert le.compute_to({"compute": [1.0, 3.0], "hv_ratio": [0.96, 0.5]}, "hv_ratio", 0.95) is None


def test_proposers_give_each_config_once_and_tpe_skips_the_table_gaps(le, table):
    random_order = le.RandomProposer(table, seed=3)
    assert sorted(iter(random_order.ask, None)) == table.configs
    tpe, proposed = le.TpeProposer(table, seed=0, max_asks=300), []
    while (config := tpe.ask()) is not None:
        proposed.append(config)
        tpe.tell(config, table.truth[config])
    assert sorted(proposed) == table.configs
    assert tpe.asks == len(proposed) + tpe.repeats + tpe.infeasible and tpe.infeasible > 0
    capped = le.TpeProposer(table, seed=0, max_asks=4)
    assert len(list(iter(lambda: _ask_tell(capped, table), None))) <= 4


def _ask_tell(proposer, table):
    config = proposer.ask()
    if config is not None:
        proposer.tell(config, table.truth[config])
    return config


def test_the_script_writes_its_json_and_plot(le, tmp_path):
    from benchmarks.trust.fidelity_tables import COLUMNS, REPLICA_COLUMNS

    out = tmp_path / "out" / "ladder.json"
    runs = write_table(tmp_path / "runs.csv", COLUMNS)
    replicas = write_replica_table(tmp_path / "replicas.csv", REPLICA_COLUMNS)
    le.main(["--runs", str(runs), "--replica-runs", str(replicas), "--out", str(out), "--seeds", "2"])
    result = json.loads(out.read_text())
    assert set(result["summary"]) == {"random", "tpe"}
    assert result["strategies"]["random"]["target"]["final"]["compute_T_mean"] == 9.0  # all 9 trained at T
    for proposer in result["strategies"].values():
        assert set(proposer) == {"ladder", "replica", "replica_without_noise_rule", "rung0", "top_rung", "target"}
        target = proposer["target"]
        assert target["final"]["compute_T_mean"] <= 9.0  # TPE may run out of asks on repeats first
        assert target["hv_ratio_at_compute"]["0.5T"]["mean"] == 0.0  # nothing trained yet at half a T
        assert len(target["hv_ratio_compute_to_0.95_T"]["per_seed"]) == 2
    assert result["machine"]["cpu"] and result["table"]["configs"] == 9
    assert out.with_suffix(".png").stat().st_size > 10_000


def test_a_replayed_search_repeats_its_front_with_the_second_seed(table):
    """The search's repeats: each member of its front at T gets the table's second seed at every rung it reached
    that lacks one, and pays for those runs."""
    from benchmarks.trust.replay import SearchReplay
    from nas.answer.target import front_at_target

    search = SearchReplay(table.replica_rows, table.replica_budgets, 3.0, table.target, noise_rule=False)
    for config in table.configs:
        search.propose(config)
    before = search.spent
    front = front_at_target(search.store.trials("replay"), search.answer().predictions)
    spent = search.repeat_front()
    rows = search.store.rungs("replay")
    seed1 = {(r.number, r.rung) for r in rows if r.seed == 1}
    reached = {n: k for n, k in enumerate(search.reached()[c] for c in search.arrivals)}
    assert seed1 == {(row.number, r) for row in front for r in range(reached[row.number])}
    assert spent == pytest.approx(sum(r.training_flops for r in rows if r.seed == 1), rel=1e-12)
    assert search.spent == pytest.approx(before + spent)
    search.close()
