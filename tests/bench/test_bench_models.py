"""The benchmarks' models and their data (run as the benchmarks run: from the root)."""

from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).parents[2]

_FACTS = """
import json, sys
from pathlib import Path
import numpy as np, torch
from automl.inputs.data import load_dataset
from automl.pipeline.export import export_onnx
from bench.models import MODELS, PEDESTAL
folder = Path(sys.argv[1])
facts = {}
for name, model in MODELS.items():
    data = load_dataset(model.source(folder), standardize="none")
    x = np.concatenate([data.x_train, data.x_test])
    graph = export_onnx(model.factory().eval(), data.x_test[:4], folder / f"{name}.onnx")
    import onnx
    facts[name] = {
        "classes": data.num_classes, "shape": list(data.input_shape),
        "floor": [float(x.min(axis=(1, 2, 3)).min()), float(x.min(axis=(1, 2, 3)).max())],
        "contrast": float((x.max(axis=(1, 2, 3)) - x.min(axis=(1, 2, 3))).max()),
        "ops": sorted({n.op_type for n in onnx.load(str(graph.path)).graph.node}),
    }
print(json.dumps({"pedestal": PEDESTAL, "models": facts}))
"""


def test_each_model_runs_on_its_data_and_dim_digits_sit_on_a_pedestal(tmp_path, zygote) -> None:
    out = zygote.python(["-c", _FACTS, str(tmp_path)], cwd=ROOT, env=dict(os.environ), timeout=300)
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout.splitlines()[-1])
    models, pedestal = facts["models"], facts["pedestal"]
    assert set(models) == {"cnn", "mobilenet", "mobilenet_v2"}
    for model in models.values():
        assert model["classes"] == 10 and model["shape"] == [1, 8, 8]
    assert models["cnn"]["floor"] == [0.0, 0.0]  # the bundled digits, raw
    low, high = models["mobilenet_v2"]["floor"]
    assert 0 <= low < 0.1 * pedestal and 0.9 * pedestal < high <= pedestal  # spread over it
    assert models["mobilenet_v2"]["contrast"] < 16.01  # the strokes: 16 above it at most
    assert "Pad" in models["mobilenet_v2"]["ops"]  # its stem pads by replicating edges
    assert "Add" in models["mobilenet_v2"]["ops"]  # inverted residual blocks add their input
