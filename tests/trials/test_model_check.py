"""The chance bound of a trained model's baseline, the warning against its expectation, and
the layer count its space is resolved for."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import pytest
from scipy import stats

from automl.errors import InputRefused
from automl.inputs.data import cached_dataset
from automl.search.space import load_space
from automl.search.spec import parse_spec
from automl.trials.model_check import (
    _compare_expected,
    chance_rate,
    chance_threshold,
    check_study_model,
    check_trained_model,
    compare_splits,
)

if TYPE_CHECKING:
    from automl.search.spec import StudySpec

# trained_factories:digits_cnn has 3 Conv layers and a Linear one.
_CNN = {"factory": "trained_factories:digits_cnn"}
_SPACE = """name: mixed
params:
  method: {type: categorical, choices: [fp32, int8-mixed]}
  keep_fp32: {type: int, low: %d, high: 6, when: {method: [int8-mixed]}}
"""


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


def _spec(model: dict, tmp_path, keep_low: int = 1) -> StudySpec:
    space = tmp_path / "space.yaml"
    space.write_text(_SPACE % keep_low)
    return parse_spec({"model": model, "search_space": str(space)})


def test_a_checked_model_has_the_layer_count_of_its_fp32_graph(
    tmp_path, digits_cnn_weights, exported_models
):
    for model, layers in (
        ({**_CNN, "weights": str(digits_cnn_weights)}, 4),  # exported by the check
        ({"weights": str(exported_models["mlp"])}, 2),  # an ONNX graph: Gemm, Gemm
    ):
        spec = _spec(model, tmp_path)
        checked = check_trained_model(spec, cached_dataset(**spec.data_args))
        assert checked.layers == layers
        space = checked.resolve(load_space(spec.search_space))
        assert space.params["keep_fp32"].high == layers - 1  # keeping them all is fp32


def test_a_space_whose_every_keep_fp32_keeps_all_layers_is_refused_before_the_study(
    tmp_path, digits_cnn_weights
):
    model = {**_CNN, "weights": str(digits_cnn_weights)}
    check_study_model(_spec(model, tmp_path, keep_low=3))  # keeps 3 of 4 at least
    with pytest.raises(InputRefused, match=r"keeps all 4 layers .*give keep_fp32 values below 4"):
        check_study_model(_spec(model, tmp_path, keep_low=4))
