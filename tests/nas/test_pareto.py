"""Known values of `nas.answer.pareto`: fronts, hypervolumes and reference points worked out by hand.

Both objectives are minimised: (validation loss, executed FLOPs per token). The running example is
A = (1, 6), B = (2, 3), C = (3, 1) against the reference point (4, 10). Each point dominates the
rectangle between it and the reference; the hypervolume is the area of their union, swept along
the loss axis (the height of a slice is 10 minus the lowest FLOPs of the points left of it):

    loss 1..2: A alone, height 10 - 6 = 4, area 1 x 4 = 4
    loss 2..3: A, B,    height 10 - 3 = 7, area 1 x 7 = 7
    loss 3..4: A, B, C, height 10 - 1 = 9, area 1 x 9 = 9      total 20
"""

import math
from dataclasses import dataclass

import numpy as np
import pytest

from nas.answer.pareto import (
    hypervolume,
    hypervolume_curve,
    is_front_candidate,
    objectives,
    pareto_rows,
    reference_point,
)
from workers.status import TrialStatus

REF = (4.0, 10.0)
NOT_COMPLETED = sorted(set(TrialStatus) - {TrialStatus.COMPLETED})


@dataclass(frozen=True)
class Row:
    """The fields of a trial row that `nas.answer.pareto` reads, plus a measured cost for `key`."""

    number: int
    val_loss: float | None
    executed_flops_per_token: float | None
    status: TrialStatus = TrialStatus.COMPLETED
    seconds_per_token: float | None = None


A, B, C = Row(0, 1.0, 6.0), Row(1, 2.0, 3.0), Row(2, 3.0, 1.0)


def numbers(rows) -> list[int]:
    return [r.number for r in rows]


def test_hypervolume_of_three_points_against_a_reference():
    assert hypervolume([A, B, C], REF) == pytest.approx(20.0)  # the module docstring's sweep
    assert hypervolume([B], REF) == pytest.approx((4 - 2) * (10 - 3))  # one point: one rectangle, 14


def test_the_front_is_the_non_dominated_completed_rows_sorted_by_flops():
    dominated = Row(3, 2.5, 4.0)  # B = (2, 3) is better on both
    assert numbers(pareto_rows([dominated, A, C, B])) == [2, 1, 0]  # by FLOPs: C (1), B (3), A (6)
    assert hypervolume([A, B, C, dominated], REF) == pytest.approx(20.0)  # inside B's rectangle: adds nothing


def test_a_duplicate_point_is_on_the_front_once_and_adds_no_volume():
    twin = Row(3, 2.0, 3.0)  # B's objectives exactly
    assert numbers(pareto_rows([A, B, twin, C])) == [2, 1, 0]  # the first of the two is kept
    assert hypervolume([A, B, twin, C], REF) == pytest.approx(20.0)


def test_ties_on_one_objective_keep_only_the_better_on_the_other():
    same_loss = Row(3, 2.0, 5.0)  # B's loss, more FLOPs: B weakly better on loss, strictly on FLOPs
    same_flops = Row(4, 2.5, 3.0)  # B's FLOPs, a higher loss
    assert numbers(pareto_rows([A, B, C, same_loss, same_flops])) == [2, 1, 0]
    assert hypervolume([A, B, C, same_loss, same_flops], REF) == pytest.approx(20.0)


@pytest.mark.parametrize("status", NOT_COMPLETED)
def test_only_completed_rows_count(status):
    # A row at (0.5, 0.5) dominates A, B and C: if it counted, the front would be it alone and the
    # hypervolume (4 - 0.5) x (10 - 0.5) = 33.25.
    best = Row(9, 0.5, 0.5, status=status)
    assert not is_front_candidate(best)
    assert numbers(pareto_rows([A, B, C, best])) == [2, 1, 0]
    assert hypervolume([A, B, C, best], REF) == pytest.approx(20.0)


@pytest.mark.parametrize(
    "loss, flops",
    [(math.inf, 0.5), (math.nan, 0.5), (None, 0.5), (0.5, math.inf), (0.5, math.nan), (0.5, None)],
)
def test_rows_with_infinite_nan_or_missing_objectives_are_left_out(loss, flops):
    bad = Row(9, loss, flops)  # completed, but not a point: would dominate everything with finite values
    assert not is_front_candidate(bad)
    assert objectives([A, bad]).tolist() == [[1.0, 6.0]]
    assert numbers(pareto_rows([A, B, C, bad])) == [2, 1, 0]
    assert hypervolume([A, B, C, bad], REF) == pytest.approx(20.0)


def test_points_beyond_the_reference_count_for_nothing():
    worse_than_ref = Row(3, 5.0, 0.5)  # loss 5 > 4: on the front (lowest FLOPs) but outside the box
    assert numbers(pareto_rows([A, B, C, worse_than_ref])) == [3, 2, 1, 0]
    assert hypervolume([A, B, C, worse_than_ref], REF) == pytest.approx(20.0)
    on_the_edge = Row(4, 0.5, 10.0)  # FLOPs exactly at the reference: a rectangle of height 0
    assert hypervolume([A, B, C, on_the_edge], REF) == pytest.approx(20.0)
    assert hypervolume([worse_than_ref, on_the_edge], REF) == 0.0


def test_no_points_no_front_no_volume():
    assert pareto_rows([]) == []
    assert hypervolume([], REF) == 0.0
    assert objectives([]).shape == (0, 2)
    failed = Row(0, 1.0, 1.0, status=TrialStatus.FAILED)
    assert pareto_rows([failed]) == [] and hypervolume([failed], REF) == 0.0


def test_hypervolume_curve_after_each_trial():
    # In the order A, C, D = (2.5, 4), B:
    #   A:          [1, 4] x [6, 10] = 3 x 4                                       = 12
    #   + C:        12 + [3, 4] x [1, 10] (9) - their overlap [3, 4] x [6, 10] (4)  = 17
    #   + D:        slices 1..2.5 height 4 (6), 2.5..3 height 6 (3), 3..4 height 9  = 18
    #   + B:        B dominates D: the three-point total                            = 20
    d = Row(3, 2.5, 4.0)
    assert hypervolume_curve([A, C, d, B], REF) == pytest.approx([12.0, 17.0, 18.0, 20.0])
    assert hypervolume_curve([], REF) == []


def test_reference_point_is_ln_vocab_and_1_1_times_the_largest_finite_flops():
    failed = Row(3, None, 8.0, status=TrialStatus.FAILED)  # any row's FLOPs count, not only completed ones
    unmeasured = [Row(4, None, None), Row(5, None, math.inf), Row(6, None, math.nan), Row(7, None, 0.0)]
    loss, flops = reference_point([A, B, C, failed, *unmeasured])
    assert loss == pytest.approx(8 * math.log(2))  # ln 256 = 5.545...: a uniform predictor over bytes
    assert flops == pytest.approx(1.1 * 8.0)  # 8.8
    assert reference_point([A], vocab_size=2) == pytest.approx((math.log(2), 1.1 * 6.0))
    assert reference_point([]) == pytest.approx((math.log(256), 1.1))  # no FLOPs at all: 1.1 x 1


def test_pareto_rows_by_another_cost():
    # By measured seconds per token: A = (1, 0.1), B = (2, 0.5), C = (3, 0.05). A dominates B (lower
    # loss, fewer seconds); C is slower to learn but the fastest, so A and C are the front, by seconds.
    rows = [
        Row(0, 1.0, 6.0, seconds_per_token=0.1),
        Row(1, 2.0, 3.0, seconds_per_token=0.5),
        Row(2, 3.0, 1.0, seconds_per_token=0.05),
        Row(3, 0.5, 1.0, seconds_per_token=None),  # not measured: left out, though it would dominate all
        Row(4, 0.5, 1.0, seconds_per_token=math.inf),
    ]
    assert numbers(pareto_rows(rows, key=lambda r: r.seconds_per_token)) == [2, 0]
    # By FLOPs, rows 3 and 4 are the same point (0.5, 1), which dominates the rest: the first is kept.
    assert numbers(pareto_rows(rows)) == [3]


def test_objectives_are_the_completed_finite_points_in_order():
    rows = [C, Row(3, 0.1, 0.1, status=TrialStatus.DIVERGED), A]
    assert np.array_equal(objectives(rows), np.array([[3.0, 1.0], [1.0, 6.0]]))
