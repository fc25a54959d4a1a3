"""Evaluate stage on a tiny real digits MLP, run in ONNX Runtime."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import onnx
import pytest
import torch
from onnxconverter_common import float16
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

from automl.errors import SpecError
from automl.pipeline.evaluate import Evaluation, evaluate

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.filterwarnings(
    "ignore:You are using the legacy TorchScript-based ONNX export:DeprecationWarning",
    "ignore:The feature will be removed:DeprecationWarning",
)


def _digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    data = load_digits()
    x = (data.images / 16.0).reshape(-1, 1, 8, 8).astype(np.float32)
    return train_test_split(x, data.target, test_size=0.25, stratify=data.target, random_state=0)


def _trained_mlp(x: np.ndarray, y: np.ndarray) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    xs, ys = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(10):
        order = torch.randperm(len(xs))
        for i in range(0, len(xs), 32):
            batch = order[i : i + 32]
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(xs[batch]), ys[batch]).backward()
            optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return _digits()


@pytest.fixture(scope="module")
def mlp(digits, tmp_path_factory) -> tuple[Path, float]:
    """The exported fp32 model and the accuracy of its torch predictions on the test split."""
    x_train, x_test, y_train, y_test = digits
    model = _trained_mlp(x_train, y_train)
    with torch.no_grad():
        torch_accuracy = float(np.mean(model(torch.from_numpy(x_test)).argmax(1).numpy() == y_test))
    path = tmp_path_factory.mktemp("evaluate") / "mlp.onnx"
    torch.onnx.export(
        model,
        torch.from_numpy(x_test[:1]),
        path,
        dynamo=False,
        input_names=["input"],
        output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        opset_version=17,
    )
    return path, torch_accuracy


def test_accuracy_matches_the_torch_model(digits, mlp):
    _, x_test, _, y_test = digits
    path, torch_accuracy = mlp
    result = evaluate(path, x_test, y_test, num_classes=10)
    assert torch_accuracy > 0.9
    # ORT and torch may round a near-tie differently: allow one sample.
    assert result.accuracy == pytest.approx(torch_accuracy, abs=1 / len(y_test))
    assert result.n == len(y_test)


def test_confusion_is_consistent_with_accuracy(digits, mlp):
    _, x_test, _, y_test = digits
    result = evaluate(mlp[0], x_test, y_test, num_classes=10)
    confusion = np.array(result.confusion)
    assert confusion.shape == (10, 10)
    assert confusion.sum() == result.n
    assert np.trace(confusion) / result.n == pytest.approx(result.accuracy)
    assert confusion.sum(axis=1).tolist() == np.bincount(y_test, minlength=10).tolist()


def test_batching_does_not_change_the_result(digits, mlp):
    _, x_test, _, y_test = digits
    whole = evaluate(mlp[0], x_test, y_test, num_classes=10, batch_size=1024)
    assert evaluate(mlp[0], x_test, y_test, num_classes=10, batch_size=7) == whole


def test_float16_input_is_cast(digits, mlp, tmp_path):
    _, x_test, _, y_test = digits
    fp16_path = tmp_path / "mlp16.onnx"
    onnx.save(float16.convert_float_to_float16(onnx.load(mlp[0]), keep_io_types=False), fp16_path)
    fp32 = evaluate(mlp[0], x_test, y_test, num_classes=10)
    fp16 = evaluate(fp16_path, x_test, y_test, num_classes=10)
    assert fp16.accuracy == pytest.approx(fp32.accuracy, abs=0.01)


def test_as_dict_is_json_ready(digits, mlp):
    _, x_test, _, y_test = digits
    result = evaluate(mlp[0], x_test[:20], y_test[:20], num_classes=10)
    data = json.loads(json.dumps(result.as_dict()))
    assert Evaluation(data["accuracy"], tuple(map(tuple, data["confusion"])), data["n"]) == result


def test_length_mismatch(digits, mlp):
    _, x_test, _, y_test = digits
    with pytest.raises(SpecError, match="x has 10 samples but y has 9 labels"):
        evaluate(mlp[0], x_test[:10], y_test[:9], num_classes=10)


@pytest.mark.parametrize(
    ("num_classes", "batch_size", "message"),
    [
        (5, 256, r"labels must lie in \[0, 5\)"),
        (12, 256, r"expected \(batch, 12\)"),
        (10, 0, "batch_size must be positive"),
    ],
)
def test_bad_arguments(digits, mlp, num_classes, batch_size, message):
    _, x_test, _, y_test = digits
    with pytest.raises(SpecError, match=message):
        evaluate(mlp[0], x_test, y_test, num_classes=num_classes, batch_size=batch_size)


def test_empty_set(mlp):
    with pytest.raises(SpecError, match="empty"):
        evaluate(mlp[0], np.zeros((0, 1, 8, 8), np.float32), np.zeros(0, int), num_classes=10)
