"""The layout rule on synthetic costs: a lower replica rung that saves nothing is not used; anchors fit a share."""

import pytest

from workers.ladder.layout import MIN_SAVING, choose_layout, plan_anchors


def test_a_replica_ladder_that_saves_nothing_trains_every_config_once_at_its_top_rung():
    layout = choose_layout(1e10, rungs=2, eta=2.0, replica=True, given=False)
    # successive halving: 1e10 for everyone, 2e10 for half = 2e10 per config, the top rung's cost
    assert (layout.rungs, layout.lowest_flops, layout.top_flops) == (1, 2e10, 2e10)
    assert layout.cost_per_config() == 2e10 and "no less" in layout.reason and "top rung" in layout.reason


@pytest.mark.parametrize(("rungs", "eta", "kept"), [(3, 3.0, True), (2, 3.0, True), (2, 2.5, False), (4, 2.0, True)])
def test_a_replica_ladder_is_kept_only_where_promotion_saves_compute(rungs, eta, kept):
    layout = choose_layout(1e10, rungs=rungs, eta=eta, replica=True, given=False)
    saving = 1 - rungs / eta ** (rungs - 1)
    assert (layout.rungs == rungs) is kept is (saving >= MIN_SAVING)
    assert layout.top_flops == pytest.approx(1e10 * eta ** (rungs - 1))  # the top rung is never moved
    if kept:
        assert f"a saving of {saving:.0%}" in layout.reason


def test_a_ladder_asked_for_or_on_one_run_is_kept_as_it_is():
    assert choose_layout(1e10, 2, 2.0, replica=True, given=True).rungs == 2
    budget_ladder = choose_layout(1e10, 2, 2.0, replica=False, given=False)
    assert budget_ladder.rungs == 2 and budget_ladder.cost_per_config(replica=False) == 2e10


def test_anchors_take_their_share_no_fewer_than_two_and_only_above_the_top_rung():
    trials = 45 * 1.8e11  # 45 configs at T / 10, T = 1.8e12
    plan = plan_anchors(trials, 1.8e11, 1.8e12, requested=2, share=0.2)
    assert plan.count == 2 and plan.flops == pytest.approx(6e11) and plan.cost <= 0.2 * trials
    assert plan_anchors(trials, 1.8e11, 1.8e12, requested=6, share=0.3).count == 4  # 0.3 x 8.1e12 / 6e11 = 4.05
    too_few = plan_anchors(12 * 1e11, 1e11, 1e12, requested=2, share=0.2)
    assert too_few.count == 0 and "more than --anchor-share 0.2" in too_few.reason
    low = plan_anchors(trials, 1.8e11, 1.8e12, requested=2, share=0.2, anchor_flops=1.8e11)
    assert low.count == 0 and "not above the top rung" in low.reason
    none = plan_anchors(trials, 1.8e11, 1.8e12, requested=0, share=0.2)
    assert none.count == 0 and "none asked for" in none.reason
