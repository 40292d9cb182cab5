"""The front's repeats run the configs the trials ran, the search's learning-rate schedule included; a search
stored before the schedule was recorded resumes on the one its trials ran."""

from helpers import measured_rung
from nas.search.launch import stored_space
from nas.search.repeats import repeat_jobs
from nas.search.settings import SearchSettings
from nas.space import space_from_dict
from nas.space.budget import Budget
from nas.store import Store, default_url
from workers.trial.contract import CountedCosts
from workers.trial.result import TrialResult

SPACE = {
    "family": "residual_lm",
    "fixed": {"vocab_size": 256, "seq_len": 32, "batch_size": 4, "n_heads": 2, "schedule": "cosine", "cooldown": 0.3},
    "params": {"lr": {"float": {"low": 1.0e-3, "high": 1.0e-2, "log": True}}, "d_model": {"categorical": [32, 64]}},
}


def test_a_repeat_runs_the_searchs_schedule(tmp_path):
    space, budget = space_from_dict(SPACE), Budget(trial_flops=1e9, min_tokens_per_param=None, layout="as_given")
    with Store(default_url(tmp_path)) as store:
        store.create_search(
            "s", requested_trials=4, budget=budget.model_dump(), space=space.spec(), settings={},
            optuna_study_name=None, code_version=None,
        )  # fmt: skip
        for n in range(4):
            config = {"lr": 3e-3, "d_model": 32 * (1 + n % 2), "optuna_number": n}
            tid = store.start_trial("s", number=n, config=config, costs=CountedCosts(1e5 * (n + 1)))
            for r in range(2):
                store.record_rung("s", n, measured_rung(r, 2.0 + 0.1 * n - 0.2 * r, 1e9 * 2**r))
            store.finish_trial(tid, TrialResult.loss_only(1.8 + 0.1 * n, 1e5 * (n + 1)))
        jobs = repeat_jobs(store, "s", space, budget, SearchSettings(repeat_seeds=1, seed=0))
    assert jobs and all(
        (j.request.optim.schedule, j.request.optim.cooldown, j.seed) == ("cosine", 0.3, 1) for j in jobs
    )
    assert all(j.request.ladder_plan.rungs == 2 for j in jobs)


def test_a_search_stored_before_the_schedule_resumes_on_the_one_its_trials_ran():
    older = {**SPACE, "fixed": {k: v for k, v in SPACE["fixed"].items() if k not in ("schedule", "cooldown")}}
    replica, ladder = Budget(trial_flops=1e9), Budget(trial_flops=1e9, ladder_kind="budget")
    assert stored_space(older, replica).schedule_fields() == {"schedule": "cosine", "cooldown": 0.2}
    assert stored_space(older, ladder).schedule_fields()["schedule"] == "wsd"  # a budget ladder always was
    assert stored_space(SPACE, replica).schedule_fields() == {"schedule": "cosine", "cooldown": 0.3}
