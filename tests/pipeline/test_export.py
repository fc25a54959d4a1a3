from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from family_cases import FAMILY_CASES

from automl.candidate import CONV_FAMILIES, ArchConfig
from automl.models import build_model
from automl.pipeline._ort import make_session
from automl.pipeline.export import export_onnx

pytest_plugins = ["family_data"]


def _check_dynamic_batch(model, path, x, classes):
    graph = onnx.load(str(path)).graph
    assert graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    session = make_session(path, ["CPUExecutionProvider"], 1)
    for batch in (1, 7):
        out = session.run(None, {"input": x[:batch]})[0]
        with torch.no_grad():
            expected = model(torch.from_numpy(x[:batch])).numpy()
        assert out.shape == (batch, classes)
        assert abs(out - expected).max() < 1e-4


@pytest.mark.parametrize("family", ["mlp", *CONV_FAMILIES])
def test_onnx_matches_torch_and_has_a_dynamic_batch(digits, family, tmp_path):
    torch.manual_seed(0)
    model = build_model(ArchConfig(family, 8, 2), digits.input_shape, digits.num_classes).eval()
    result = export_onnx(model, digits.x_test[:32], tmp_path / "m.onnx")
    assert result.max_abs_diff < 1e-4
    _check_dynamic_batch(model, result.path, digits.x_test, digits.num_classes)


@pytest.mark.parametrize("case", FAMILY_CASES)
def test_every_family_exports_in_its_input_dtype(family_data, case, tmp_path):
    name, arch = FAMILY_CASES[case]
    data = family_data[name]
    model = build_model(arch, data.input_shape, data.num_classes, vocab_size=data.vocab_size).eval()
    result = export_onnx(model, data.x_test[:16], tmp_path / "m.onnx")
    assert result.max_abs_diff < 1e-4
    graph_input = onnx.load(str(result.path)).graph.input[0].type.tensor_type
    expected = onnx.TensorProto.INT64 if data.is_tokens else onnx.TensorProto.FLOAT
    assert graph_input.elem_type == expected
    fixed = [d.dim_value for d in graph_input.shape.dim[1:]]
    assert fixed == list(data.input_shape)  # e.g. the sequence length: fixed, the data's
    assert data.x_test.dtype == (np.int64 if data.is_tokens else np.float32)
    _check_dynamic_batch(model, result.path, data.x_test, data.num_classes)
