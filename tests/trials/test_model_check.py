"""The chance bound of a trained model's baseline, and the warning against its expectation."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from scipy import stats

from automl.trials.model_check import (
    _compare_expected,
    chance_rate,
    chance_threshold,
    compare_splits,
)


@pytest.mark.parametrize(("classes", "n"), [(2, 50), (10, 210), (10, 5000), (100, 300)])
def test_the_chance_bound_is_reached_by_guessing_one_time_in_a_thousand(classes, n):
    needed = chance_threshold(1 / classes, n)
    assert 1 / classes < needed < 1
    guessing = stats.binom(n, 1 / classes)
    assert guessing.sf(needed * n) <= 1e-3 < guessing.sf(needed * n - 1)


def test_the_bound_tightens_with_more_validation_samples():
    assert chance_threshold(0.1, 5000) < chance_threshold(0.1, 210) < chance_threshold(0.1, 30)


def test_chance_on_imbalanced_labels_is_always_answering_the_commonest_class():
    labels = np.array([0] * 90 + [1] * 10)
    assert chance_rate(labels, 2) == 0.9  # a model that learned nothing scores this
    assert chance_rate(np.arange(100) % 10, 10) == pytest.approx(0.1)


def test_a_baseline_clearly_below_its_expected_accuracy_is_warned_of(caplog):
    with caplog.at_level(logging.WARNING, logger="automl.trials.model_check"):
        _compare_expected(0.91, 0.93, 300, "m:f")  # within the noise of 300 samples
        assert not caplog.records
        _compare_expected(0.60, 0.93, 300, "m:f")
    assert "clearly below the expected_accuracy 0.930" in caplog.text


def test_a_baseline_clearly_better_on_validation_than_on_test_is_warned_of(caplog):
    with caplog.at_level(logging.WARNING, logger="automl.trials.model_check"):
        compare_splits(0.985, 270, 0.972, 360, "m:f")  # the digits CNN, not trained on val
        compare_splits(1.0, 30, 0.95, 360, "m:f")  # too few validation samples to tell
        assert not caplog.records
        compare_splits(1.0, 270, 0.935, 360, "m:f")  # as a model trained on all of x_train
    assert "scores 1.000 on the 270 validation samples but 0.935 on the 360 test" in caplog.text
    assert "Give x_val and y_val held out from its training" in caplog.text
