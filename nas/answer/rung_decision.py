"""Whether a trial climbs to its next rung: multi-objective successive halving with a noise margin.

At the end of rung r of trial i the search decides from the study's rungs up to r (so that trials which
climbed higher are not favoured by their extra rungs):

1. each trial's loss at the target T is predicted from those rungs (`nas.answer.target.answer_at_target`);
2. trial i climbs if it is among the best ceil(n / eta) of the n trials that reached rung r, by non-dominated
   sorting on (predicted loss at T, executed FLOPs per token[, KV bytes per token]: the search's objectives,
   `Ladder.objectives`) (`nas.answer.promotion`, MO-ASHA), or if it is
   tied with that cut within twice the study's seed noise carried to T (a coin flip: it climbs);
3. on a replica ladder (`remeasure`: each rung its own run) a tied trial first measures the rung again with a
   second seed (`REMEASURE_SEED_OFFSET`) and climbs if its seed mean is still tied; the first trials to report
   do so too until the study has `NOISE_REPEATS` repeated rungs, so that the noise is measured, not assumed.
   A budget ladder (one run branched at each rung) cannot measure a rung again: its ties climb.

At its top rung, or when it stops, the trial's verdict carries its prediction from every stored rung and its
band. `decide_rung` is pure: the store-backed gate a worker calls is `nas.search.rung_gate`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from workers.trial.contract import RungVerdict

from ..space.objectives import DEFAULT_OBJECTIVES, Objective
from ..store import RungRow
from .promotion import Candidate, promotable, tied_with_cut
from .target import Answer, answer_at_target

__all__ = ["NOISE_REPEATS", "REMEASURE_SEED_OFFSET", "Ladder", "decide_rung", "repeated_rungs"]

REMEASURE_SEED_OFFSET = 1000  # a rung measured again runs seed + this (the front's repeats use seed + 1, + 2, ...)
NOISE_REPEATS = 2  # repeated rungs the study needs before its seed noise is trusted for ties


@dataclass(frozen=True)
class Ladder:
    """The rungs a search's trials climb: `n_rungs` of them at ratio `eta`, answered for `target_flops`;
    `remeasure`: a rung can be measured again with another seed (replica rungs, each its own run);
    `noise_rule`: ties within twice the seed noise climb or are measured again (off: plain MO-ASHA);
    `objectives`: what the search minimises (`nas.space.objectives`)."""

    target_flops: float
    eta: float
    n_rungs: int
    remeasure: bool = False
    noise_rule: bool = True
    objectives: tuple[Objective, ...] = DEFAULT_OBJECTIVES


def repeated_rungs(rows: Sequence[RungRow]) -> int:
    """How many (trial, rung) pairs have been measured with more than one seed."""
    seeds: dict[tuple[int, int], set[int]] = {}
    for r in rows:
        if r.val_loss is not None and math.isfinite(r.val_loss):
            seeds.setdefault((r.number, r.rung), set()).add(r.seed)
    return sum(len(s) >= 2 for s in seeds.values())


def decide_rung(ladder: Ladder, rows: Sequence[RungRow], number: int, rung: int, flops_per_token: float) -> RungVerdict:
    """The verdict for trial `number` at the end of `rung`, from every stored rung row `rows` (its own included)."""
    earlier = [r for r in rows if r.rung <= rung]
    answer = answer_at_target(earlier, ladder.target_flops)
    predicted = answer.predictions[number].loss
    if rung >= ladder.n_rungs - 1 or not math.isfinite(predicted):
        return final_verdict(ladder, rows, number)
    candidates = _candidates(ladder, earlier, rung, answer, number, flops_per_token)
    if number in promotable(candidates, ladder.eta):
        return RungVerdict(True, predicted)
    if not ladder.noise_rule:
        return final_verdict(ladder, rows, number)
    measured_twice = len({r.seed for r in earlier if r.number == number and r.rung == rung}) >= 2
    again = ladder.remeasure and not measured_twice
    if tied_with_cut(number, candidates, ladder.eta):  # within the noise of the cut: a coin flip
        return RungVerdict(False, predicted, None, True) if again else RungVerdict(True, predicted)
    if again and repeated_rungs(earlier) < NOISE_REPEATS:
        return RungVerdict(False, predicted, None, True)  # the study's noise is not measured yet
    return final_verdict(ladder, rows, number)


def final_verdict(ladder: Ladder, rows: Sequence[RungRow], number: int) -> RungVerdict:
    """The trial stops: its prediction and band (None while uncalibrated) from every stored rung."""
    p = answer_at_target(rows, ladder.target_flops).predictions[number]
    band = (p.low, p.high) if p.low is not None and p.high is not None else None
    return RungVerdict(False, p.loss, band)


def _candidates(
    ladder: Ladder, rows: Sequence[RungRow], rung: int, answer: Answer, number: int, flops_per_token: float
) -> list[Candidate]:
    """The trials at `rung`: predicted loss at T, FLOPs per token (and KV bytes per token when the search
    minimises them; stored when each trial started) and the margin of twice the study's seed noise carried to
    T (the curve's slope (C_r / T)^alpha; 0 while the noise is unmeasured)."""
    at_rung = {r.number: r for r in rows if r.rung == rung}
    noise = answer.noise if repeated_rungs(rows) >= NOISE_REPEATS else None
    out = []
    for n, row in at_rung.items():
        p = answer.predictions[n]
        slope = (row.budget_flops / ladder.target_flops) ** answer.exponents.get(p.group, 0.0)
        margin = 2.0 * noise * slope if noise is not None else 0.0
        flops = flops_per_token if n == number else (row.executed_flops_per_token or math.inf)
        kv = (row.kv_bytes_per_token or math.inf) if Objective.KV in ladder.objectives else None
        out.append(Candidate(n, p.loss, flops, margin if math.isfinite(p.loss) else 0.0, kv))
    return out
