"""The fidelity benchmark's replay picks the front's repeats as a real search does: the same trials, stored once in a
search's store and once replayed from a table, get the same members measured again, and the rule they share
(`nas.search.repeats.front_to_repeat` on the search's own answer, its bias taken out) picks otherwise than the same
rule on the uncorrected rungs would."""

from __future__ import annotations

from benchmarks.trust.replay import SearchReplay
from nas.answer.error_model import measured_model
from nas.answer.target import answer_at_target
from nas.search.repeats import front_to_repeat, repeat_jobs
from nas.search.settings import SearchSettings
from nas.space import space_from_dict, to_configs
from nas.space.budget import Budget
from nas.store import Store, default_url
from search_spaces.residual_lm import flops_per_token, parameter_count
from workers.training.records import RungRecord
from workers.trial.contract import CountedCosts
from workers.trial.result import TrialResult

SPACE = space_from_dict({
    "family": "residual_lm",
    "fixed": {"vocab_size": 256, "seq_len": 64, "batch_size": 8, "n_heads": 2, "mlp_ratio": 4.0},
    "params": {"n_layers": {"categorical": [2, 4, 6]}, "d_model": {"categorical": [32, 64]},
               "residual": {"categorical": ["cascaded", "nag", "ancre"]}},
})  # fmt: skip
BUDGET = Budget(trial_flops=9e10, trials=12, target_flops=1.8e12, min_tokens_per_param=None)  # top rung alone
# (n_layers, d_model, residual, top-rung loss): NAG's and ANCRe's top rung judge them too poorly, so
# the corrected front differs from the raw one
TRIALS = [
    (2, 32, "cascaded", 2.30), (2, 32, "nag", 2.28), (4, 32, "cascaded", 2.20), (4, 32, "nag", 2.17),
    (6, 32, "ancre", 2.13), (2, 64, "cascaded", 2.10), (2, 64, "nag", 2.08), (4, 64, "ancre", 2.02),
    (4, 64, "cascaded", 2.00), (6, 64, "nag", 1.96), (6, 64, "cascaded", 1.95), (6, 32, "cascaded", 2.15),
]  # fmt: skip


def table() -> list[dict]:
    """The trials as the fidelity tables hold them: the top replica rung at T/10, width d_T / 2, two seeds."""
    rows = []
    for config, (layers, width, family, loss) in enumerate(TRIALS):
        arch = to_configs(SPACE, {"n_layers": layers, "d_model": width, "residual": family})[0]
        for seed, noise in ((0, 0.0), (1, 0.004)):
            rows.append(dict(config=config, residual=family, n_layers=layers, d_model=width, mod_rate=0.0,
                             params=parameter_count(arch), executed_flops_per_token=flops_per_token(arch).executed,
                             seed=seed, rung=0, budget_flops=1.8e11, tokens=1000, val_loss=loss + noise,
                             compute_flops=1.8e11, replica_d_model=width // 2, replica_params=1000,
                             tokens_per_param=20.0, target_tokens_per_param=20.0, on_path=True))  # fmt: skip
    return rows


def test_the_replay_and_a_real_search_repeat_the_same_members(tmp_path):
    rows = table()
    with Store(default_url(tmp_path)) as store:
        store.create_search("s", requested_trials=len(TRIALS), budget=BUDGET.model_dump(), space=SPACE.spec(),
                            settings={}, optuna_study_name=None, code_version=None)  # fmt: skip
        for r in (r for r in rows if r["seed"] == 0):
            knobs = {"n_layers": r["n_layers"], "d_model": r["d_model"], "residual": r["residual"]}
            tid = store.start_trial("s", number=r["config"], config=knobs,
                                    costs=CountedCosts(r["executed_flops_per_token"]))  # fmt: skip
            store.record_rung("s", r["config"], RungRecord(0, 0, r["budget_flops"], 1, r["tokens"], r["val_loss"],
                                                            r["compute_flops"], d_model=r["replica_d_model"],
                                                            params=1000, tokens_per_param=20.0,
                                                            target_tokens_per_param=20.0, on_path=True))  # fmt: skip
            store.finish_trial(tid, TrialResult.loss_only(r["val_loss"], r["executed_flops_per_token"]))
        searched = {j.number for j in repeat_jobs(store, "s", SPACE, BUDGET, SearchSettings(repeat_seeds=1))}
        raw = set(front_to_repeat(answer_at_target(store.rungs("s"), 1.8e12), store.trials("s")))
    replay = SearchReplay(rows, [1.8e11], 2.0, 1.8e12, model=measured_model())
    try:
        for config in range(len(TRIALS)):
            replay.propose(config)
        replay.repeat_front()
        replayed = {r.number for r in replay.store.rungs("replay") if r.seed == 1}
    finally:
        replay.close()
    assert searched and searched == replayed
    assert raw != searched  # the bias taken out moves the front: a rule on the raw rungs would pick otherwise
