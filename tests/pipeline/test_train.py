from __future__ import annotations

import pytest
import torch

from automl.candidate import ArchConfig, TrainConfig
from automl.errors import TrialFailed
from automl.models import build_model
from automl.pipeline.train import accuracy, train


def _trained(digits, seed=0):
    torch.manual_seed(1234 + seed)  # disturb the global RNG: results must not depend on it
    model = build_model(ArchConfig("cnn", 16, 2), digits.input_shape, digits.num_classes, seed=seed)
    return train(model, digits, TrainConfig(epochs=4), seed=seed)


def test_training_learns_digits(digits):
    result = _trained(digits)
    assert len(result.history) == 4
    assert result.history[-1]["loss"] < result.history[0]["loss"]
    assert accuracy(result.model, digits.x_test, digits.y_test) > 0.85


def test_training_is_reproducible_with_a_seed(digits):
    first, second = _trained(digits), _trained(digits)
    for a, b in zip(first.model.parameters(), second.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_threads_are_pinned(digits):
    model = build_model(ArchConfig("mlp", 8, 1), digits.input_shape, digits.num_classes)
    train(model, digits, TrainConfig(epochs=1), threads=1)
    assert torch.get_num_threads() == 1


def test_a_diverging_loss_fails_the_trial_naming_the_learning_rate(digits):
    # Left to run, the NaN model fails later, as ONNX outputs that "differ from torch".
    model = build_model(ArchConfig("mlp", 8, 1), digits.input_shape, digits.num_classes)
    with pytest.raises(TrialFailed, match=r"diverged: the loss of epoch 1 is nan.*train.lr 1e\+30"):
        train(model, digits, TrainConfig(epochs=2, lr=1e30))
