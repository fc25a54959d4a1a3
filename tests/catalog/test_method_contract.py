"""What every quantization method of the catalog must do; the cases come from the registry.

A method defined anywhere that the catalog (or a pytest plugin) loads is tested here the moment
it exists: it quantizes two trained digits models through the quantize stage, keeps accuracy
within its stated drop, places its compute on each runtime that can start here, and is refused
by a target whose runtimes do not run it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnxruntime as ort
import pytest

from automl.catalog import BACKENDS, CPU, METHODS, get_method
from automl.errors import SpecError
from automl.pipeline.quantize import quantize_method
from automl.targets._registry import _parse_target
from automl.targets.presence import provider_starts

if TYPE_CHECKING:
    from pathlib import Path

    from automl.inputs.data import Dataset

MODELS = ("cnn", "mlp")


def _starts(backend: str) -> bool:
    """Whether the runtime starts here: a GPU build of ONNX Runtime lists its providers even
    where no driver lets them load, so those are probed."""
    runtime = BACKENDS[backend]
    gpu = [p for p in runtime.providers if runtime.device == "cuda" and p != CPU]
    return runtime.unavailable() is None and all(map(provider_starts, gpu))


# (method, backend) pairs whose providers start here.
RUNNABLE = [(m.name, b) for m in METHODS.values() for b in m.backends if _starts(b)]
LACKING = [(m.name, b) for m in METHODS.values() for b in BACKENDS if b not in m.backends]


@pytest.fixture(scope="module")
def quantized(digits: Dataset, exported_models, tmp_path_factory) -> dict[tuple[str, str], Path]:
    """(method, model) → the quantized graph; made once per pair, on first use."""
    folder = tmp_path_factory.mktemp("contract")
    made: dict[tuple[str, str], Path] = {}

    def get(method: str, model: str) -> Path:
        if (method, model) not in made:
            out = folder / f"{model}-{method}.onnx"
            q = quantize_method(exported_models[model], out, method, calibration=digits.x_calib)
            assert (q.method, q.bits, q.path) == (method, get_method(method).bits, out)
            made[method, model] = out
        return made[method, model]

    return get  # type: ignore[return-value]


def _accuracy(path: Path, data: Dataset, disabled: tuple[str, ...]) -> float:
    """Test accuracy with every graph rewrite off: the graph's own arithmetic, Q/DQ unfused."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        str(path), options, providers=["CPUExecutionProvider"], disabled_optimizers=disabled
    )
    logits = session.run(None, {session.get_inputs()[0].name: data.x_test})[0]
    return float(np.mean(logits.argmax(axis=1) == data.y_test))


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("method", list(METHODS))
def test_a_method_keeps_accuracy_within_its_stated_drop(quantized, digits, method, model):
    entry = get_method(method)
    fp32 = _accuracy(quantized("fp32", model), digits, ())
    accuracy = _accuracy(quantized(method, model), digits, entry.unsafe_rewrites)

    assert fp32 - accuracy <= entry.accuracy_drop, f"{method} on {model}: {fp32} → {accuracy}"


@pytest.mark.parametrize(("method", "backend"), RUNNABLE)
def test_a_method_runs_on_its_backends_with_compute_in_place(quantized, method, backend):
    runtime = BACKENDS[backend]
    session = runtime.open_session(quantized(method, "cnn"), method, threads=1, batch_size=4)

    assert sum(runtime.placement(session).values()) > 0


@pytest.mark.parametrize(("method", "backend"), LACKING)
def test_a_target_whose_backends_lack_a_method_refuses_it(method: str, backend: str) -> None:
    chosen = BACKENDS[backend]
    data = {
        "name": "probe",
        "kind": chosen.device,
        "description": "a target of one backend",
        "backends": [backend],
        "methods": [method],
        "intra_op_threads": 1,
        "peaks": {"flops": None, "memory_bandwidth_gbs": None, "memory_gb": None, "source": "-"},
        **({"device_names": ["NVIDIA H100 80GB HBM3"]} if chosen.device == "cuda" else {}),
    }
    with pytest.raises(SpecError, match=rf"no backend of \['{backend}'\] runs methods"):
        _parse_target(data, "probe")
    with pytest.raises(SpecError, match=f"does not run method '{method}'"):
        chosen.open_session("never-opened.onnx", method, threads=1)
