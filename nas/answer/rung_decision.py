"""Whether a trial climbs to its next rung: the rule, in one place (`decide_rung`, pure).

A trial is measured on a ladder of rungs 0..k-1 with budgets C_r = C eta^r. At the end of rung r < k-1 of trial i,
its verdict is one of three (`workers.trial.contract.Verdict`):

1. **climb** if, among ALL n trials that have reported at rung r so far (i included), i is in the best ceil(n / eta)
   by the order of `nas.answer.promotion.rank`: non-dominated sorting on (predicted loss at the target T, executed
   FLOPs per token[, KV bytes per token]: the search's objectives, `PromotionRule.objectives`), then crowding distance.
   Each trial's loss at T is predicted from the study's rungs up to r (`nas.answer.target.answer_at_target`), so
   that trials which climbed higher are not favoured by their extra rungs; running peers are compared on the FLOPs
   stored when they started.
2. Otherwise, if i is tied with that cut within twice the study's seed noise carried to T (a coin flip, PASHA,
   arXiv 2207.06940): on a replica ladder (`PromotionRule.remeasure`: each rung its own run) it first **measure_again**s
   the rung with a second seed (`REMEASURE_SEED_OFFSET`) and climbs if its seed mean is still tied; a budget
   ladder (one run branched at each rung) cannot measure a rung again, so its ties climb. On a replica ladder the
   first trials to fall below the cut also measure again until the study has `NOISE_REPEATS` repeated rungs, so
   that the noise is measured, not assumed. With `PromotionRule.noise_rule` off this step is skipped (plain MO-ASHA).
3. Otherwise it **stop**s. So does every trial at its top rung, or with a non-finite predicted loss. A stop carries
   the trial's prediction and band from every stored rung: the loss Optuna is told, on the scale every told loss
   shares.

The decision is taken once, when the trial reports (asynchronous successive halving in its "stopping" form, as
Ray Tune's ASHAScheduler does it, Li et al., arXiv 1810.05934; multi-objective with NSGA-II's selection as in
MO-ASHA, Schmucker et al., arXiv 2106.12639): an early trial is judged against few peers (the first trial at a rung
always climbs), and a trial stopped now is not revived if later arrivals would have ranked it higher.

Why not Optuna's pruners or Ray Tune's ASHA: they are single-objective. Ranking a rung by loss alone keeps the
low-loss (usually expensive) end of the trade-off and stops the cheap architectures the Pareto front needs; any
fixed scalarisation of (loss, FLOPs) picks one point of the trade-off in advance.

One decision computes each answer it reads once: the answer at rung r ranks; a stop below the top rung also reads
the answer from every stored rung; at the top rung they are the same rows and the same answer. The store-backed
gate a worker calls is `nas.search.rung_gate`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from workers.trial.contract import REMEASURE_SEED_OFFSET, RungVerdict

from ..space.objectives import DEFAULT_OBJECTIVES, Objective
from ..store import RungRow
from .promotion import Candidate, promotable, tied_with_cut
from .target import Answer, answer_at_target

__all__ = ["NOISE_REPEATS", "REMEASURE_SEED_OFFSET", "PromotionRule", "decide_rung", "repeated_rungs"]

NOISE_REPEATS = 2  # repeated rungs the study needs before its seed noise is trusted for ties


@dataclass(frozen=True)
class PromotionRule:
    """How a search's trials climb its rungs: `rungs` of them at ratio `eta`, answered for `target_flops`;
    `remeasure`: a rung can be measured again with another seed (replica rungs, each its own run);
    `noise_rule`: ties within twice the seed noise climb or are measured again (off: plain MO-ASHA);
    `objectives`: what the search minimises (`nas.space.objectives`)."""

    target_flops: float
    eta: float
    rungs: int
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


def decide_rung(
    rule: PromotionRule, rows: Sequence[RungRow], number: int, rung: int, flops_per_token: float
) -> RungVerdict:
    """The verdict for trial `number` at the end of `rung` (module docstring), from every stored rung row `rows`
    (its own included); `flops_per_token`: the trial's executed forward FLOPs per token."""
    earlier = [r for r in rows if r.rung <= rung]
    ranked = answer_at_target(earlier, rule.target_flops)
    predicted = ranked.predictions[number].loss

    def stop() -> RungVerdict:
        final = ranked if len(earlier) == len(rows) else answer_at_target(rows, rule.target_flops)
        p = final.predictions[number]
        return RungVerdict.stop(p.loss, (p.low, p.high) if p.low is not None and p.high is not None else None)

    if rung >= rule.rungs - 1 or not math.isfinite(predicted):
        return stop()
    candidates = _candidates(rule, earlier, rung, ranked, number, flops_per_token)
    if number in promotable(candidates, rule.eta):
        return RungVerdict.climb(predicted)
    if not rule.noise_rule:
        return stop()
    measured_twice = len({r.seed for r in earlier if r.number == number and r.rung == rung}) >= 2
    again = rule.remeasure and not measured_twice
    if tied_with_cut(number, candidates, rule.eta):  # within the noise of the cut: a coin flip
        return RungVerdict.measure_again(predicted) if again else RungVerdict.climb(predicted)
    if again and repeated_rungs(earlier) < NOISE_REPEATS:
        return RungVerdict.measure_again(predicted)  # the study's noise is not measured yet
    return stop()


def _candidates(
    rule: PromotionRule, rows: Sequence[RungRow], rung: int, answer: Answer, number: int, flops_per_token: float
) -> list[Candidate]:
    """The trials at `rung`: predicted loss at T, FLOPs per token (and KV bytes per token when the search
    minimises them; stored when each trial started) and the margin of twice the study's seed noise carried to
    T (the curve's slope (C_r / T)^alpha; 0 while the noise is unmeasured)."""
    at_rung = {r.number: r for r in rows if r.rung == rung}
    noise = answer.noise if repeated_rungs(rows) >= NOISE_REPEATS else None
    out = []
    for n, row in at_rung.items():
        p = answer.predictions[n]
        slope = (row.budget_flops / rule.target_flops) ** answer.exponents.get(p.group, 0.0)
        margin = 2.0 * noise * slope if noise is not None else 0.0
        flops = flops_per_token if n == number else (row.executed_flops_per_token or math.inf)
        kv = (row.kv_bytes_per_token or math.inf) if Objective.KV in rule.objectives else None
        out.append(Candidate(n, p.loss, flops, margin if math.isfinite(p.loss) else 0.0, kv))
    return out
