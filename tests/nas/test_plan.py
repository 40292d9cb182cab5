"""The plan's count of the front it will measure again: the expected Pareto front of random points."""

import numpy as np
import pytest

from nas.search.plan import expected_front_size


def _front_size(points: np.ndarray) -> int:
    """Points no other point is at least as good as on every coordinate (minimising)."""
    return sum(not np.any(np.all(points <= p, axis=1) & np.any(points < p, axis=1)) for p in points)


@pytest.mark.parametrize("objectives", [1, 2, 3])
def test_the_expected_front_is_that_of_random_points(objectives):
    rng = np.random.default_rng(0)
    n, draws = 10, 4000
    mean = np.mean([_front_size(rng.random((n, objectives))) for _ in range(draws)])
    assert expected_front_size(n, objectives) == pytest.approx(mean, rel=0.03)
    assert expected_front_size(n, 2) == pytest.approx(sum(1 / k for k in range(1, n + 1)))
