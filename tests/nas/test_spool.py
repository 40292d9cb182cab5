"""The driver's spool keeps typed results as JSON and writes them back as the same records, exactly once."""

import math
from dataclasses import replace

from nas.search.spool import Spool, StartedTrial, spooled_finish, spooled_start_and_finish
from nas.store import Store, default_url
from search_spaces.residual_lm import ArchConfig
from workers.status import TrialStatus
from workers.training.records import CurvePoint, RungRecord
from workers.trial.contract import CountedCosts
from workers.trial.result import TrialResult, WidthCertificate

ARCH = ArchConfig(vocab_size=256, seq_len=32, n_layers=2, d_model=32, n_heads=2, residual="nag", mod_rate=0.25)


def result(loss: float, seed: int) -> TrialResult:
    """A completed result with every kind of field: rungs, a curve, a width certificate, configs, an inf."""
    rungs = [RungRecord(r, seed, 1e9 * 2**r, 10, 1280, loss + 0.1 * (1 - r), 1e9 * 2**r, 1.0, 16, 900, 1.4, 1.5, True)
             for r in range(2)]  # fmt: skip
    width = WidthCertificate(8, 32, 0.1, 3.0, 4.0, 3.0, 0.02, 0.03, 0.05)
    curve = [CurvePoint(1, 128, 5.5, 1e6, 3e-3, 2), CurvePoint(2, 256, 5.0, 2e6, 3e-4, 2, loss, 1, 1)]
    base = TrialResult.loss_only(loss, 1e6)
    return replace(base, rungs=rungs, width=width, curve=curve, arch=ARCH, seed=seed, realised_flops_per_token=math.inf)


def test_kept_results_are_written_back_as_the_records_they_were(tmp_path, monkeypatch):
    monkeypatch.setenv("RESNAS_SPOOL", str(tmp_path / "spool"))
    with Store(default_url(tmp_path)) as store:
        store.create_search("s", requested_trials=2, budget={}, space={}, settings={}, optuna_study_name=None,
                            code_version=None)  # fmt: skip
        started = StartedTrial(0, 0, {"lr": 3e-3}, CountedCosts(1e6, 2.0, 3.0))
        row = started.open_row(store, "s")
        spool = Spool(store, "s")
        spool.append(spooled_finish(row, result(2.0, 0)))
        spool.append(spooled_start_and_finish(StartedTrial(1, 0, {"lr": 1e-3}, CountedCosts(2e6)), result(2.5, 1)))
        failed = replace(TrialResult.untrained(TrialStatus.FAILED, "worker died", 1e6, 0.0), seed=0)
        spool.append(spooled_finish(row, failed))  # written after the result above, so it wins
        assert len(spool) == 3 and spool.replay() == 3 and len(spool) == 0
        trials = {t.number: t for t in store.trials("s")}
        assert trials[0].status == "failed" and trials[0].failure_reason == "worker died"
        assert (trials[0].kv_bytes_per_token, trials[0].decode_flops_per_token) == (2.0, 3.0)  # from its start
        later = trials[1]
        assert later.status == "completed" and later.val_loss == 2.5 and later.executed_flops_per_token == 1e6
        assert later.realised_flops_per_token == math.inf and later.config["arch"] == ARCH.model_dump()
        assert store.width(later.id) == result(2.5, 1).width and [p.step for p in store.curve(later.id)] == [1, 2]
        assert [(r.number, r.rung, r.seed) for r in store.rungs("s")] == [(0, 0, 0), (0, 1, 0), (1, 0, 1), (1, 1, 1)]
