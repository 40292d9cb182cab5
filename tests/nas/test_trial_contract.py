"""What crosses between the search and a trial is typed: a Tune config holds the space's knobs and one
`TrialTicket`, the worker is handed a `TrialRequest`, the rung gate is told each rung and answers a
`RungVerdict`, a trial returns a `TrialOutcome`, and the store keeps the knobs only."""

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from nas.search.study import DefineByRun
from nas.search.trainable import TrialPlanner
from nas.space import load_space
from nas.space.budget import Budget
from nas.store import Store
from search_spaces.residual_lm import ArchConfig, flavour, tokens_for
from workers.data.config import DataConfig
from workers.ladder.plans import RungSpacing
from workers.training.config import OptimConfig, RunConfig
from workers.training.records import RungRecord
from workers.trial.contract import (
    TICKET_KEY,
    CountedCosts,
    LadderPlan,
    RungVerdict,
    TrialOutcome,
    TrialRequest,
    TrialTicket,
    split_config,
    with_ticket,
)
from workers.trial.execute import run_request

ROOT = Path(__file__).resolve().parents[2]
TINY_SPACE = ROOT / "tests" / "data" / "tiny_space.yaml"


def test_a_config_holds_the_knobs_and_one_ticket():
    space = load_space(TINY_SPACE)
    budget = Budget(trial_flops=2e9, rungs=2, eta=2, min_tokens_per_param=None)
    study = optuna.create_study(directions=["minimize", "minimize"])
    study.enqueue_trial({"n_layers": 2, "d_model": 32, "residual": "nag", "mod_rate": 0.25, "lr": 2e-3})  # valid
    trial = study.ask()
    returned = DefineByRun(space, budget)(trial)
    assert set(returned) == {TICKET_KEY}  # the define-by-run adds no loose key to the config
    ticket = returned[TICKET_KEY]
    assert isinstance(ticket, TrialTicket) and ticket.number == trial.number
    assert ticket.costs.executed_flops_per_token > 0 and ticket.costs.kv_bytes_per_token > 0
    assert set(trial.params) == set(space.params)  # what Tune records as the config besides the ticket
    # the typed configs the knobs map to: what the trial trains, no dict in between
    assert ticket.configs is not None and ticket.configs.arch.mod_rate == trial.params["mod_rate"]
    assert ticket.configs.optim.lr == trial.params["lr"]
    knobs, again = split_config(with_ticket(trial.params, ticket))
    assert knobs == trial.params and again == ticket
    with pytest.raises(ValueError, match="reserved"):
        with_ticket({TICKET_KEY: 1}, ticket)
    with pytest.raises(ValueError, match="carries no"):
        split_config({**trial.params, TICKET_KEY: {"number": 1}})  # a dict in the ticket's place is refused


def test_an_invalid_config_gets_a_ticket_saying_why_and_infinite_flops():
    space = load_space(TINY_SPACE)
    ticket = DefineByRun(space, Budget(trial_flops=2e9, min_tokens_per_param=None)).ticket(
        4, {"n_layers": 1, "d_model": 33, "residual": "nag", "mod_rate": 0.0, "lr": 3e-3}
    )
    assert ticket.number == 4 and ticket.costs.executed_flops_per_token == float("inf") and ticket.configs is None
    assert ticket.infeasible_reason and "d_model" in ticket.infeasible_reason


def test_a_budget_says_how_its_trials_are_measured():
    replica = Budget(trial_flops=1e9, rungs=3, eta=2, min_tokens_per_param=None).ladder.trial_plan
    assert replica.replica_flops == pytest.approx((1e9, 2e9, 4e9)) and replica.top_flops == pytest.approx(4e9)
    assert replica.spacing == RungSpacing(rungs=3, eta=2) and replica.target_flops == pytest.approx(4e10)
    assert replica.is_replica and replica.reports_rungs and replica.rungs == 3
    ladder = Budget(trial_flops=1e9, rungs=3, eta=2, ladder_kind="budget", min_tokens_per_param=None).ladder.trial_plan
    assert ladder.replica_flops == () and ladder.spacing == RungSpacing(rungs=3, eta=2) and not ladder.is_replica
    single = Budget(trial_flops=1e9, rungs=1, min_tokens_per_param=None).ladder.trial_plan
    assert single.spacing is None and single.replica_flops == () and single.top_flops == 1e9
    assert not single.reports_rungs and single.rungs == 1
    with pytest.raises(ValueError, match="target_flops"):
        LadderPlan(1e9, replica_flops=(1e9,))


def test_the_planner_turns_a_ticket_into_a_typed_request():
    space = load_space(TINY_SPACE)
    knobs = {"n_layers": 2, "d_model": 32, "residual": "ancre", "mod_rate": 0.25, "lr": 2e-3}
    ticket = DefineByRun(space, Budget(trial_flops=2e9, min_tokens_per_param=None)).ticket(7, knobs)
    request = TrialPlanner(DataConfig(), 3, LadderPlan(1e9)).request(ticket)
    assert isinstance(request, TrialRequest) and isinstance(request.arch, ArchConfig)
    assert (request.arch.residual, request.arch.d_model, request.optim.lr, request.run.batch_size) == (
        "ancre",
        32,
        2e-3,
        4,
    )
    assert request.seed == 3 and request.ticket.number == 7 and request.rung_gate is None
    invalid = DefineByRun(space, Budget(trial_flops=2e9, min_tokens_per_param=None)).ticket(8, {**knobs, "d_model": 33})
    with pytest.raises(ValueError, match="trial 8 has no valid config"):
        TrialPlanner(DataConfig(), 3, LadderPlan(1e9)).request(invalid)


class RecordingGate:
    """A rung gate that climbs every rung but the one it is told to stop at, predicting 10 + the rung."""

    def __init__(self, stop_at: int):
        self.stop_at, self.calls = stop_at, []

    def __call__(self, trial: int, flops_per_token: float, rung: RungRecord) -> RungVerdict:
        self.calls.append((trial, flops_per_token, rung))
        predicted = 10.0 + rung.rung
        return RungVerdict.climb(predicted) if rung.rung < self.stop_at else RungVerdict.stop(predicted)


@pytest.mark.parametrize("stop_at", [0, 2])
def test_a_trial_tells_its_gate_every_rung_and_tells_the_search_its_last_prediction(tmp_path, stop_at):
    cfg = flavour("debug", vocab_size=256, seq_len=32)
    run = RunConfig(batch_size=4, eval_sequences=4, evals=1, report_every=100)
    top = 36 * run.batch_size * cfg.seq_len / tokens_for(cfg, 1.0)  # 36 steps at the top rung
    gate = RecordingGate(stop_at)
    plan = LadderPlan(top, RungSpacing(rungs=3, eta=3.0))
    ticket = TrialTicket(5, CountedCosts(123.0))
    request = TrialRequest(
        ticket, cfg, OptimConfig(lr=3e-3), run, DataConfig(cache_dir=str(tmp_path)), 0, plan, gate, False
    )
    climbed: list[int] = []
    outcome = run_request(request, on_rung_done=climbed.append)
    assert isinstance(outcome, TrialOutcome) and outcome.number == 5
    assert [c[2].rung for c in gate.calls] == list(range(stop_at + 1))
    assert all(c[:2] == (5, 123.0) and c[2].seed == 0 for c in gate.calls)  # the trial's number and FLOPs, its seed
    assert climbed == list(range(stop_at)) and outcome.told_loss == 10.0 + stop_at
    assert outcome.result.rungs == [c[2] for c in gate.calls]


RECORDING_SEARCH = """
import json, sys
from pathlib import Path
from nas.search.launch import launch_search
from nas.search.ray_env import configure_ray_env
from nas.search.settings import SearchSettings
from nas.space import load_space
from nas.space.budget import Budget
from nas.store import Store

LOG = Path(sys.argv[2])

def recording_worker(request, report=None, on_rung_done=None):
    from workers.training.records import RungRecord
    from workers.trial.contract import TrialOutcome
    from workers.trial.result import TrialResult
    gate, flops = request.rung_gate, request.ticket.costs.executed_flops_per_token
    verdict = gate(request.ticket.number, flops, RungRecord(0, request.seed, 1e9, 1, 1, 2.0 + request.optim.lr, 1e9))
    with LOG.open("a") as fh:
        fh.write(json.dumps({"request": type(request).__name__, "arch": type(request.arch).__name__,
                             "verdict": type(verdict).__name__, "number": request.ticket.number}) + "\\n")
    return TrialOutcome(request.ticket.number, TrialResult.loss_only(2.0, flops), verdict.predicted_loss)

configure_ray_env()
space = load_space(sys.argv[3])
budget = Budget(trial_flops=2e9, trials=3, rungs=2, eta=2, min_tokens_per_param=None)
settings = SearchSettings(workers=1, repeat_seeds=0, ray_address=None)
with Store(sys.argv[1]) as store:
    launch_search(store, "contract", space, budget, settings, show_progress=False, worker=recording_worker)
"""


@pytest.mark.slow
def test_a_search_hands_its_worker_typed_requests_and_stores_the_knobs_only(tmp_path):
    url, log = f"sqlite:///{tmp_path / 'r.db'}", tmp_path / "calls.jsonl"
    script = tmp_path / "search.py"
    script.write_text(RECORDING_SEARCH)
    done = subprocess.run(
        [sys.executable, str(script), url, str(log), str(TINY_SPACE)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 3
    assert {(c["request"], c["arch"], c["verdict"]) for c in calls} == {("TrialRequest", "ArchConfig", "RungVerdict")}
    space = load_space(TINY_SPACE)
    with Store(url) as store:
        trials = store.trials("contract")
        assert sorted(t.number for t in trials) == sorted(c["number"] for c in calls)
        for t in trials:  # the stored config: the space's knobs (and what ran), never the ticket
            assert set(t.config) - {"arch", "optim"} == set(space.params), t.config
        assert {r.number for r in store.rungs("contract")} == {t.number for t in trials}  # the gate stored them


def test_the_contract_imports_none_of_the_modules_that_carry_it_out():
    """It sits below them: the trial, the replica rungs, the trainer and the executor import it, never the reverse
    (only the records and the configs it names, which sit below it too)."""
    import ast

    tree = ast.parse((ROOT / "workers" / "trial" / "contract.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    carried_out_by = {"run", "replica", "execute", "width_probe", "training.train"}
    assert not {m for m in imported if m in carried_out_by}, imported
    assert {"training.records", "result"} <= imported
