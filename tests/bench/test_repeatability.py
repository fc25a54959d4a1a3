"""The figure bench.repeatability reports: how far two runs of the same trials disagree."""

from __future__ import annotations

import pytest

from bench.repeatability import disagreement


def test_disagreement_is_the_factor_between_a_trials_two_figures_either_way() -> None:
    median, largest = disagreement([2.0, 1.0, 3.0], [1.0, 1.0, 3.3])
    assert median == pytest.approx(1.1) and largest == pytest.approx(2.0)
    assert disagreement([1.0, 3.3], [2.0, 3.0]) == pytest.approx((1.55, 2.0))
