"""The chance bound of a trained model's baseline, and the warning against its expectation."""

from __future__ import annotations

import logging

import pytest
from scipy import stats

from automl.trials.model_check import _compare_expected, chance_threshold


@pytest.mark.parametrize(("classes", "n"), [(2, 50), (10, 210), (10, 5000), (100, 300)])
def test_the_chance_bound_is_reached_by_guessing_one_time_in_a_thousand(classes, n):
    needed = chance_threshold(classes, n)
    assert 1 / classes < needed < 1
    guessing = stats.binom(n, 1 / classes)
    assert guessing.sf(needed * n) <= 1e-3 < guessing.sf(needed * n - 1)


def test_the_bound_tightens_with_more_validation_samples():
    assert chance_threshold(10, 5000) < chance_threshold(10, 210) < chance_threshold(10, 30)


def test_a_baseline_clearly_below_its_expected_accuracy_is_warned_of(caplog):
    with caplog.at_level(logging.WARNING, logger="automl.trials.model_check"):
        _compare_expected(0.91, 0.93, 300, "m:f")  # within the noise of 300 samples
        assert not caplog.records
        _compare_expected(0.60, 0.93, 300, "m:f")
    assert "clearly below the expected_accuracy 0.930" in caplog.text
