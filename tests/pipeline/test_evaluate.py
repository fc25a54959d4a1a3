"""Evaluate stage on a real digits MLP from the train and export stages, run in ONNX Runtime."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import onnx
import pytest
from onnxconverter_common import float16

from automl.catalog.runtimes._ort import make_session
from automl.errors import SpecError
from automl.pipeline.evaluate import Evaluation, evaluate
from automl.pipeline.train import accuracy

pytest_plugins = ["family_data"]

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(scope="module")
def mlp(digits, trained_models, exported_models) -> tuple[Path, float]:
    """The exported fp32 MLP and the accuracy of its torch predictions on the test split."""
    torch_accuracy = accuracy(trained_models["mlp"], digits.x_test, digits.y_test)
    return exported_models["mlp"], torch_accuracy


def test_accuracy_matches_the_torch_model(digits, mlp):
    x_test, y_test = digits.x_test, digits.y_test
    path, torch_accuracy = mlp
    result = evaluate(path, x_test, y_test, num_classes=10)
    assert torch_accuracy > 0.9
    # ORT and torch may round a near-tie differently: allow one sample.
    assert result.accuracy == pytest.approx(torch_accuracy, abs=1 / len(y_test))
    assert result.n == len(y_test)


def test_confusion_is_consistent_with_accuracy(digits, mlp):
    x_test, y_test = digits.x_test, digits.y_test
    result = evaluate(mlp[0], x_test, y_test, num_classes=10)
    confusion = np.array(result.confusion)
    assert confusion.shape == (10, 10)
    assert confusion.sum() == result.n
    assert np.trace(confusion) / result.n == pytest.approx(result.accuracy)
    assert confusion.sum(axis=1).tolist() == np.bincount(y_test, minlength=10).tolist()


def test_batching_does_not_change_the_result(digits, mlp):
    x_test, y_test = digits.x_test, digits.y_test
    whole = evaluate(mlp[0], x_test, y_test, num_classes=10, batch_size=1024)
    assert evaluate(mlp[0], x_test, y_test, num_classes=10, batch_size=7) == whole


def test_an_open_session_is_evaluated_as_its_file(digits, mlp):
    session = make_session(mlp[0], ["CPUExecutionProvider"], 1)
    from_file = evaluate(mlp[0], digits.x_test, digits.y_test, num_classes=10, batch_size=32)
    assert (
        evaluate(session, digits.x_test, digits.y_test, num_classes=10, batch_size=32) == from_file
    )


def test_float16_input_is_cast(digits, mlp, tmp_path):
    x_test, y_test = digits.x_test, digits.y_test
    fp16_path = tmp_path / "mlp16.onnx"
    onnx.save(float16.convert_float_to_float16(onnx.load(mlp[0]), keep_io_types=False), fp16_path)
    fp32 = evaluate(mlp[0], x_test, y_test, num_classes=10)
    fp16 = evaluate(fp16_path, x_test, y_test, num_classes=10)
    assert fp16.accuracy == pytest.approx(fp32.accuracy, abs=0.01)


def test_as_dict_is_json_ready(digits, mlp):
    x_test, y_test = digits.x_test, digits.y_test
    result = evaluate(mlp[0], x_test[:20], y_test[:20], num_classes=10)
    data = json.loads(json.dumps(result.as_dict()))
    assert Evaluation(data["accuracy"], tuple(map(tuple, data["confusion"])), data["n"]) == result


def test_length_mismatch(digits, mlp):
    x_test, y_test = digits.x_test, digits.y_test
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
    x_test, y_test = digits.x_test, digits.y_test
    with pytest.raises(SpecError, match=message):
        evaluate(mlp[0], x_test, y_test, num_classes=num_classes, batch_size=batch_size)


def test_empty_set(mlp):
    with pytest.raises(SpecError, match="empty"):
        evaluate(mlp[0], np.zeros((0, 1, 8, 8), np.float32), np.zeros(0, int), num_classes=10)


def test_token_ids_are_fed_as_int64_and_features_are_refused(family_data, tmp_path):
    from automl.candidate import ArchConfig
    from automl.models import build_model
    from automl.pipeline.export import export_onnx

    data = family_data["tokens"]
    arch = ArchConfig("transformer", 16, 1, heads=2)
    model = build_model(arch, data.input_shape, data.num_classes, vocab_size=data.vocab_size)
    path = export_onnx(model.eval(), data.x_test[:8], tmp_path / "t.onnx").path
    as_int32 = data.x_test.astype(np.int32)  # cast to the graph's int64
    result = evaluate(path, as_int32, data.y_test, num_classes=2, batch_size=7)
    assert result.n == len(data.y_test)
    with pytest.raises(SpecError, match="model's input is int64 and the data is float32"):
        evaluate(path, data.x_test.astype(np.float32), data.y_test, num_classes=2)
