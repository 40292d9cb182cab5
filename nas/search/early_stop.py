"""Early stopping of losing trials, compared only within bands of similar executed FLOPs.

Optuna's pruners and Ray's ASHA are single-objective: they would stop every expensive trial for
being slower to learn per step, and empty one end of the front. Here a trial is compared only
with trials whose executed forward FLOPs per token lie in the same band (a factor `band_ratio`
wide, on a log scale), at the same validation point (the trainer validates at fixed shares of
each trial's own token budget, numbered by `eval_index`), and stopped when its validation loss
is worse than the median of at least `min_peers` peers there. Executed FLOPs are known from the config, so only the
loss needs training to be compared (docs/design.md §6): the stopper reads them from the trial's `TrialTicket` in its
Tune config (`split_config`) and the validation point from the progress report's `CurvePoint` (`progress_of`).

A stopped trial never reaches the Pareto front: its last report carries +inf objectives, and the
store records it as `stopped` with its partial curve.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from ray import tune

from workers.trial.contract import split_config

from .trainable import progress_of


def flop_band(flops_per_token: float, band_ratio: float) -> int:
    """Index of the log-spaced band holding `flops_per_token`."""
    return math.floor(math.log(flops_per_token) / math.log(band_ratio))


class FlopBandStopper(tune.Stopper):
    """Stop a trial whose loss at validation point k is above the median of its FLOP band at k.

    Points before `grace` of the budget, and the last one (the trial is done anyway), never stop.
    """

    def __init__(self, band_ratio: float = 2.0, min_peers: int = 3, grace: float = 0.25):
        self.band_ratio, self.min_peers, self.grace = band_ratio, min_peers, grace
        self.seen: dict[tuple[int, int], dict[str, float]] = defaultdict(dict)  # (band, k) -> trial -> loss

    def __call__(self, trial_id: str, result: dict) -> bool:
        """Whether Tune should stop trial `trial_id` at this report (`result`: Tune's, with the trial's config)."""
        point = progress_of(result)
        if point is None or point.eval_index is None or point.evals is None or point.val_loss is None:
            return False
        flops = split_config(result["config"])[1].costs.executed_flops_per_token
        if not (flops > 0 and math.isfinite(flops)):
            return False
        k, evals = point.eval_index, point.evals
        peers = self.seen[(flop_band(flops, self.band_ratio), k)]
        others = [loss for tid, loss in peers.items() if tid != trial_id]
        peers[trial_id] = point.val_loss
        if k / evals < self.grace or k >= evals or len(others) < self.min_peers:
            return False
        return point.val_loss > statistics.median(others)

    def stop_all(self) -> bool:
        return False


class TrialTimeLimit(tune.Stopper):
    """Stop a trial after `seconds` of wall time (its last report is progress only)."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __call__(self, trial_id: str, result: dict) -> bool:
        return result.get("time_total_s", 0.0) >= self.seconds

    def stop_all(self) -> bool:
        return False
