"""bench/observability.py's verdict: a confidence interval of the median of paired costs."""

from __future__ import annotations

import pytest

from bench.observability import judge, median_interval


@pytest.mark.parametrize(
    ("n", "ranks"),
    [(6, (1, 6)), (9, (2, 8)), (15, (4, 12)), (30, (10, 21))],
)
def test_median_interval_is_the_binomial_order_statistics(n: int, ranks: tuple[int, int]) -> None:
    # The textbook 95% ranks (1-based) for n values: P(median outside) <= 5%.
    values = [float(v) for v in range(1, n + 1)]
    assert median_interval(values) == (float(ranks[0]), float(ranks[1]))


def test_median_interval_of_too_few_values_is_their_range() -> None:
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)


def test_judge_needs_the_whole_interval_on_one_side_of_the_target() -> None:
    assert judge([1.0, 2.0, 3.0, 4.0, 4.5, 4.9, 2.0, 3.0, 1.0]) == "met"
    assert judge([5.5, 6.0, 7.0, 8.0, 9.0, 6.0, 7.0, 5.1, 6.5]) == "NOT met"
    # a median under the target whose interval reaches over it: not a pass
    assert judge([1.0, 2.0, 3.0, 4.0, 4.5, 8.0, 9.0, 10.0, 11.0]) == "inconclusive"
