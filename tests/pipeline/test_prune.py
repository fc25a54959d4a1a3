from __future__ import annotations

import pytest

from automl.candidate import FAMILIES, ArchConfig, TrainConfig
from automl.errors import SpecError
from automl.models import build_model
from automl.pipeline.export import export_onnx
from automl.pipeline.prune import prune
from automl.pipeline.train import accuracy, train


@pytest.mark.parametrize("family", FAMILIES)
def test_pruning_shrinks_macs_and_stays_exportable(digits, family, tmp_path):
    model = build_model(ArchConfig(family, 16, 2), digits.input_shape, digits.num_classes)
    trained = train(model, digits, TrainConfig(epochs=2)).model
    result = prune(trained, digits, 0.5, TrainConfig(epochs=1))
    share = result.macs_after / result.macs_before
    # Removing half the channels cuts MACs to between (1-r)^2 (both sides pruned) and (1-r).
    assert 0.25 * 0.8 <= share <= 0.5 * 1.1
    assert result.params_after < result.params_before
    assert result.model.classifier.out_features == digits.num_classes
    exported = export_onnx(result.model, digits.x_test[:16], tmp_path / "pruned.onnx")
    assert exported.max_abs_diff < 1e-4


def test_fine_tune_recovers_accuracy(digits):
    model = build_model(ArchConfig("cnn", 32, 2), digits.input_shape, digits.num_classes)
    trained = train(model, digits, TrainConfig(epochs=6)).model
    before = accuracy(trained, digits.x_test, digits.y_test)
    result = prune(trained, digits, 0.5, TrainConfig(epochs=3))
    assert len(result.history) == 3
    assert accuracy(result.model, digits.x_test, digits.y_test) > before - 0.05


def test_ratio_zero_leaves_the_model_untouched(digits):
    model = build_model(ArchConfig("mlp", 16, 1), digits.input_shape, digits.num_classes)
    result = prune(model, digits, 0.0, TrainConfig(epochs=1))
    assert result.macs_after == result.macs_before and result.history == ()


def test_bad_ratio(digits):
    model = build_model(ArchConfig("mlp", 16, 1), digits.input_shape, digits.num_classes)
    with pytest.raises(SpecError, match="pruning_ratio"):
        prune(model, digits, 1.0, TrainConfig(epochs=1))
