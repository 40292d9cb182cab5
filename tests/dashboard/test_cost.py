"""Measured cost on the fronts: the time-axis front against brute force, the measured / counted ratio, and the
trials without a measured speed (left out and counted). Pure functions on hand-made rows; no store, no browser."""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import fields, replace

import pytest

from dashboard.cost import COUNTED, MEASURED, cost_ratios, seconds_per_token, unmeasured, unmeasured_note
from dashboard.front_figures import cost_ratio_figure, pareto_figure
from dashboard.tables import target_frame, trials_frame
from dashboard.target_figures import target_front_figure
from nas.answer.pareto import pareto_rows
from nas.answer.target import Prediction
from nas.store import TrialRow

TOKENS = 1_000_000


def _row(number, status, loss, flops, seconds, residual="cascaded", mod_rate=0.0, **kw) -> TrialRow:
    """A trial whose training steps took `seconds` per token (step share 1, no ladder branches)."""
    measured = seconds is not None
    values = {f.name: None for f in fields(TrialRow)} | dict(
        id=100 + number,
        search_id=1,
        number=number,
        attempt=0,
        status=status,
        config={},
        previous_attempts=[],
        residual=residual,
        mod_rate=mod_rate,
        val_loss=loss,
        executed_flops_per_token=flops,
        tokens_seen=TOKENS if measured else 0,
        training_flops=3.0 * flops * TOKENS if measured else 0.0,
        wall_time_s=seconds * TOKENS if measured else 1.0,
        tokens_per_s=1.0 / seconds if measured else 0.0,
        step_time_share=1.0 if measured else None,
    )
    return TrialRow(**(values | kw))


# (number, status, val loss, executed FLOPs/token, measured step s/token): the FLOP front is 1, 2, 4, 0, 7; the
# time front 1, 3, 4, 0. MoD config 2 takes twice the time per FLOP of the others (ratio 2): on the FLOP front,
# dominated by 0 on time; 3 runs fast per FLOP (ratio 2/3): dominated on FLOPs, on the time front.
TABLE = [
    _row(0, "completed", 2.0, 4e6, 4e-6),
    _row(1, "completed", 2.4, 1e6, 1e-6),
    _row(2, "completed", 2.2, 2e6, 4e-6, mod_rate=0.5),
    _row(3, "completed", 2.3, 3e6, 2e-6, residual="nag"),
    _row(4, "completed", 2.1, 3.5e6, 3.5e-6, residual="ancre"),
    _row(5, "failed", math.inf, 2e6, None, failure_reason="RuntimeError: worker died"),
    _row(6, "infeasible", math.inf, 9e6, None),
    _row(7, "completed", 1.9, 5e6, None, tokens_seen=TOKENS, tokens_per_s=5e4),  # stored without a step time
    _row(8, "running", None, 1e6, None),
]


def _brute_force_front(rows, cost) -> set[int]:
    """Numbers of the completed rows with a finite loss and cost that no other such row dominates."""
    pts = {
        r.number: (cost(r), r.val_loss)
        for r in rows
        if r.status == "completed" and r.val_loss is not None and math.isfinite(r.val_loss) and cost(r) is not None
    }
    return {
        n for n, p in pts.items() if not any(q[0] <= p[0] and q[1] <= p[1] and q != p for m, q in pts.items() if m != n)
    }


def _trace(fig, name: str):
    (found,) = [t for t in fig.data if t.name == name]
    return found


def test_seconds_per_token_times_the_training_steps_and_counts_ladder_branch_tokens():
    assert seconds_per_token(TABLE[3]) == pytest.approx(2e-6)
    # a ladder run: 80 of 100 s in steps; its branches trained 1e12 FLOPs beside the main run's 3e12, so the steps
    # trained 4/3 x tokens_seen tokens
    ladder = replace(TABLE[0], wall_time_s=100.0, step_time_share=0.8, tokens_seen=100_000, training_flops=3e12)
    assert seconds_per_token(replace(ladder, branch_flops=1e12)) == pytest.approx(80.0 / (100_000 * 4 / 3))
    assert seconds_per_token(replace(ladder, branch_flops=0.0)) == pytest.approx(80.0 / 100_000)
    assert [r.number for r in TABLE if seconds_per_token(r) is None] == [5, 6, 7, 8]


def test_the_front_on_the_time_axis_is_the_brute_force_front_and_differs_from_the_flop_front():
    on_flops = {r.number for r in pareto_rows(TABLE)}
    on_time = {r.number for r in pareto_rows(TABLE, key=seconds_per_token)}
    assert on_flops == _brute_force_front(TABLE, lambda r: r.executed_flops_per_token) == {0, 1, 2, 4, 7}
    assert on_time == _brute_force_front(TABLE, seconds_per_token) == {0, 1, 3, 4}
    assert [r.number for r in pareto_rows(TABLE, key=MEASURED.of)] == [1, 3, 4, 0]  # sorted by seconds

    fig = pareto_figure({"s": TABLE}, axis=MEASURED)
    front, dominated = _trace(fig, "front: s"), _trace(fig, "dominated: s")
    assert [c[1] for c in front.customdata] == [1, 3, 4, 0]
    assert list(front.x) == pytest.approx([1e-6, 2e-6, 3.5e-6, 4e-6])
    assert [c[1] for c in dominated.customdata] == [2]  # 7 has no measured speed: not drawn
    assert "seconds per token" in fig.layout.xaxis.title.text and fig.layout.xaxis.type == "log"
    counted = pareto_figure({"s": TABLE})
    assert [c[1] for c in _trace(counted, "front: s").customdata] == [1, 2, 4, 0, 7]
    assert "FLOPs" in counted.layout.xaxis.title.text


def test_random_tables_time_front_matches_brute_force():
    rng = random.Random(0)
    for _ in range(20):
        rows = [
            _row(n, rng.choice(["completed"] * 4 + ["failed"]), rng.uniform(1.5, 3), rng.uniform(1e5, 1e7), s)
            for n in range(30)
            for s in [rng.choice([None, rng.uniform(1e-7, 1e-5), rng.uniform(1e-7, 1e-5)])]
        ]
        assert {r.number for r in pareto_rows(rows, key=seconds_per_token)} == _brute_force_front(
            rows, seconds_per_token
        )
        assert {r.number for r in pareto_rows(rows)} == _brute_force_front(rows, lambda r: r.executed_flops_per_token)


def test_the_ratio_median_is_one_and_a_config_twice_as_slow_per_flop_has_ratio_two():
    ratios = cost_ratios(TABLE)
    assert statistics.median(ratios.values()) == pytest.approx(1.0)
    by_number = {r.number: ratios[r.id] for r in TABLE if r.id in ratios}
    assert by_number == pytest.approx({0: 1.0, 1: 1.0, 2: 2.0, 3: 2 / 3, 4: 1.0})
    # scaling every time (a machine twice as slow) leaves the ratios as they are
    slower = [replace(r, wall_time_s=2 * r.wall_time_s) for r in TABLE]
    assert cost_ratios(slower) == pytest.approx(ratios)
    assert cost_ratios([TABLE[5], TABLE[8]]) == {}

    frame = trials_frame(TABLE).set_index("number")
    assert frame.loc[2, "cost_ratio"] == pytest.approx(2.0) and frame.loc[3, "measured_s_per_token"] == 2e-6
    assert frame[["cost_ratio", "measured_s_per_token"]].loc[[5, 6, 7, 8]].isna().all().all()
    assert set(frame.index[frame["on_front"]]) == {0, 1, 2, 4, 7}
    assert set(trials_frame(TABLE, MEASURED).query("on_front")["number"]) == {0, 1, 3, 4}

    fig = cost_ratio_figure({"s": TABLE})
    (points,) = [t for t in fig.data if t.name == "measured / counted: s"]
    assert [c[1] for c in points.customdata] == [0, 1, 2, 3, 4] and list(points.y) == pytest.approx([1, 1, 2, 2 / 3, 1])
    assert list(points.x) == [4e6, 1e6, 2e6, 3e6, 3.5e6] and fig.layout.yaxis.type == "log"
    assert "2.00 x the study's median" in points.hovertext[2]


def test_trials_without_a_measured_speed_are_left_out_of_the_time_axis_and_counted():
    assert [r.number for r in unmeasured(TABLE)] == [5, 6, 7]  # running 8 has no result yet: not counted
    assert unmeasured_note(TABLE) == (
        "3 trials without a measured speed are not shown on the measured axis (1 completed, 1 failed, 1 infeasible)"
    )
    assert unmeasured_note(TABLE[:2]) is None
    assert unmeasured_note(TABLE[:2] + [TABLE[5]]).startswith("1 trial without a measured speed is not shown")
    fig = pareto_figure({"s": TABLE}, show_infeasible=True, axis=MEASURED)
    drawn = {c[1] for t in fig.data if t.customdata is not None for c in t.customdata}
    assert drawn == {0, 1, 2, 3, 4}
    assert COUNTED.of(TABLE[6]) == 9e6 and MEASURED.of(TABLE[6]) is None


def test_the_target_front_is_recomputed_on_the_time_axis():
    # at the target MoD config 2 predicts below 0 and 4: on FLOPs the front is 1, 2, 7; on time 2 ties 0's
    # seconds at a lower loss, 3 joins (fast per FLOP) and 7 has no measured speed
    losses = {0: 1.80, 1: 2.20, 2: 1.75, 3: 2.00, 4: 2.05, 7: 1.70}
    predictions = {n: Prediction(loss, loss - 0.05, loss + 0.05, 2, "study", None) for n, loss in losses.items()}
    targeted = [replace(r, val_loss=losses.get(r.number, math.inf)) for r in TABLE]
    fig = target_front_figure(TABLE, predictions, 1e15, axis=MEASURED)
    front = _trace(fig, "front at T")
    expected = _brute_force_front(targeted, seconds_per_token)
    assert [c[0] for c in front.customdata] == [1, 3, 2] and set(expected) == {1, 3, 2}
    assert list(front.x) == pytest.approx([1e-6, 2e-6, 4e-6])
    frame = target_frame(TABLE, predictions, MEASURED).set_index("number")
    assert set(frame.index[frame["on_front_at_T"]]) == {1, 2, 3}
    assert frame.loc[2, "cost_ratio"] == pytest.approx(2.0)
    counted = target_frame(TABLE, predictions).set_index("number")
    assert set(counted.index[counted["on_front_at_T"]]) == {1, 2, 7}
    assert _brute_force_front(targeted, lambda r: r.executed_flops_per_token) == {1, 2, 7}
