from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from family_cases import CONV_FAMILIES, FAMILY_CASES

from automl.candidate import ArchConfig
from automl.catalog.runtimes._ort import make_session
from automl.errors import TrialFailed
from automl.models import build_model
from automl.pipeline.export import compare_logits, export_onnx

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


def _deep_narrow(gain: float) -> torch.nn.Module:
    """A ResNet-sized stand-in: 14 narrow layers whose logits grow with ``gain`` per layer."""
    torch.manual_seed(0)
    layers = [torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 64), torch.nn.ReLU()]
    for _ in range(12):
        layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(64, 10))
    with torch.no_grad():
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                layer.weight.mul_(gain)
    return model.eval()


def test_large_logits_of_unscaled_inputs_export(tmp_path):
    pixels = np.random.default_rng(0).integers(0, 256, (64, 3, 16, 16)).astype(np.float32)
    model = _deep_narrow(gain=3.0)
    with torch.no_grad():
        assert model(torch.from_numpy(pixels)).abs().max() > 1000  # logits in the thousands
    result = export_onnx(model, pixels, tmp_path / "m.onnx")
    assert result.max_abs_diff > 1e-4  # an absolute bound of 1e-4 refused this export


def test_logits_out_of_tolerance_or_a_flipped_class_fail():
    expected = np.array([[10.0, 1.0, 0.0], [0.0, 50.0, 0.0]], dtype=np.float32)
    assert compare_logits(expected + 0.005, expected).holds  # within 1e-4 + 1e-3 * 50
    off = expected.copy()
    off[0, 2] += 0.5
    parity = compare_logits(off, expected)
    assert not parity.holds and parity.class_flips == 0 and parity.worst_ratio > 40
    flipped = expected[:, [1, 0, 2]]
    assert compare_logits(flipped, expected).class_flips == 2
    close = np.array([[50.0, 49.96, 0.0]], dtype=np.float32)  # apart by 0.04, within 0.05
    swapped = np.array([[49.975, 49.985, 0.0]], dtype=np.float32)  # each logit moves 0.025
    parity = compare_logits(swapped, close)
    assert parity.worst_ratio <= 1 and parity.class_flips == 1 and not parity.holds
    tie = np.array([[50.0, 49.999, 0.0]], dtype=np.float32)  # a near-tie may flip
    assert compare_logits(tie[:, [1, 0, 2]], tie).holds


def test_a_wrong_graph_is_refused_naming_both_figures(tmp_path, monkeypatch):
    import automl.pipeline.export as export

    model = _deep_narrow(gain=1.0)
    real = export.make_session

    class Shifted:  # ORT's logits, shifted by one: a wrong export
        def __init__(self, session):
            self.session = session

        def get_inputs(self):
            return self.session.get_inputs()

        def run(self, names, feeds):
            return [out + 1.0 for out in self.session.run(names, feeds)]

    monkeypatch.setattr(export, "make_session", lambda *a, **k: Shifted(real(*a, **k)))
    x = np.random.default_rng(0).random((8, 3, 16, 16), dtype=np.float32)
    with pytest.raises(TrialFailed, match=r"largest difference 1\.00e\+00, .*x the allowed"):
        export_onnx(model, x, tmp_path / "m.onnx")
