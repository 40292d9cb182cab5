"""FLOP-band early stopping: losers are stopped only against peers of similar executed FLOPs."""

from nas.search.early_stop import FlopBandStopper, TrialTimeLimit, flop_band
from nas.search.trainable import PROGRESS_KEY
from workers.training.records import CurvePoint
from workers.trial.contract import CountedCosts, TrialTicket, with_ticket


def report(flops: float, k: int | None, loss: float | None, evals: int = 4) -> dict:
    """A Tune progress report as a stopper sees it: the trial's config (its ticket) and the curve point."""
    point = CurvePoint(k or 1, 1, 3.0, 1.0, 1e-3, evals, loss, k, evals if k is not None else None)
    return {"config": with_ticket({"lr": 1e-3}, TrialTicket(0, CountedCosts(flops))), PROGRESS_KEY: point}


def test_a_trial_worse_than_its_band_median_is_stopped():
    stopper = FlopBandStopper(band_ratio=2.0, min_peers=3)
    for i, loss in enumerate([2.0, 2.1, 2.2]):
        assert not stopper(f"peer{i}", report(1.5e6, 2, loss))
    assert stopper("loser", report(1.6e6, 2, 2.5))
    assert not stopper("winner", report(1.7e6, 2, 1.9))


def test_trials_of_other_flop_bands_are_not_compared():
    stopper = FlopBandStopper(band_ratio=2.0, min_peers=3)
    for i in range(3):
        stopper(f"cheap{i}", report(1.0e6, 2, 1.0))  # cheap models learning fast
    assert flop_band(8.0e6, 2.0) != flop_band(1.0e6, 2.0)
    assert not stopper("expensive", report(8.0e6, 2, 3.0))  # no peers in its band yet


def test_grace_period_last_point_and_progress_only_reports_never_stop():
    stopper = FlopBandStopper(min_peers=1, grace=0.5)
    stopper("peer", report(1e6, 1, 1.0))
    stopper("peer", report(1e6, 4, 1.0))
    assert not stopper("late", report(1e6, 1, 9.0))  # 1/4 < grace
    assert not stopper("late", report(1e6, 4, 9.0))  # the last point: nothing left to save
    assert not stopper("late", report(1e6, None, None))
    assert not stopper.stop_all()


def test_trial_time_limit():
    limit = TrialTimeLimit(10.0)
    assert not limit("t", {"time_total_s": 9.9}) and limit("t", {"time_total_s": 10.0})
