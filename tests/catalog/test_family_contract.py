"""What every model family of the catalog must do; the cases come from the registry.

A family is tested here the moment it is registered: on the layout its ``example`` names, it
builds, trains, prunes (keeping its classifier whole), exports to ONNX within 1e-4 of torch with
a dynamic batch, and quantizes; on every layout it does not take, it is refused with what it
needs.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from family_cases import FAMILY_CASES

from automl.candidate import TrainConfig
from automl.catalog import FAMILIES, LAYOUTS
from automl.errors import SpecError
from automl.models import build_model
from automl.pipeline.export import export_onnx
from automl.pipeline.prune import prune
from automl.pipeline.quantize import quantize_method
from automl.pipeline.train import train
from automl.search.compat import input_problem

pytest_plugins = ["family_data"]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_family_trains_prunes_exports_and_quantizes(family_data, family, tmp_path):
    layout, arch = FAMILY_CASES[family]
    data = family_data[layout]
    model = build_model(arch, data.input_shape, data.num_classes, vocab_size=data.vocab_size)
    trained = train(model, data, TrainConfig(epochs=1)).model
    result = prune(trained, data, 0.5, TrainConfig(epochs=1))

    assert result.params_after < 0.8 * result.params_before
    assert result.model.classifier.out_features == data.num_classes
    exported = export_onnx(result.model, data.x_test[:16], tmp_path / "pruned.onnx")
    assert exported.max_abs_diff < 1e-4
    quantized = quantize_method(exported.path, tmp_path / "q.onnx", "int8-dynamic")
    session = ort.InferenceSession(str(quantized.path), providers=["CPUExecutionProvider"])
    logits = session.run(None, {session.get_inputs()[0].name: data.x_test[:5]})[0]
    assert logits.shape == (5, data.num_classes) and np.isfinite(logits).all()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_family_refuses_the_layouts_it_does_not_take(family_data, family):
    entry, arch = FAMILIES[family], FAMILY_CASES[family][1]
    for layout in (layout for layout in LAYOUTS if layout not in entry.takes):
        data = family_data[layout]
        problem = input_problem(family, data)
        assert problem is not None and entry.needs in problem
        with pytest.raises(SpecError, match=f"family '{family}' needs"):
            build_model(arch, data.input_shape, data.num_classes, vocab_size=data.vocab_size)
