from __future__ import annotations

import onnx
import pytest
import torch

from automl.candidate import FAMILIES, ArchConfig
from automl.models import build_model
from automl.pipeline._ort import make_session
from automl.pipeline.export import export_onnx


@pytest.mark.parametrize("family", FAMILIES)
def test_onnx_matches_torch_and_has_a_dynamic_batch(digits, family, tmp_path):
    torch.manual_seed(0)
    model = build_model(ArchConfig(family, 8, 2), digits.input_shape, digits.num_classes).eval()
    result = export_onnx(model, digits.x_test[:32], tmp_path / "m.onnx")
    assert result.max_abs_diff < 1e-4
    graph = onnx.load(str(result.path)).graph
    assert graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    session = make_session(result.path, ["CPUExecutionProvider"], 1)
    for batch in (1, 7):
        out = session.run(None, {"input": digits.x_test[:batch]})[0]
        with torch.no_grad():
            expected = model(torch.from_numpy(digits.x_test[:batch])).numpy()
        assert out.shape == (batch, 10)
        assert abs(out - expected).max() < 1e-4
