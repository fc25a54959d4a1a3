from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch
from torch import nn

from automl.catalog import CPU, get_backend
from automl.catalog.runtimes._ort import make_session
from automl.catalog.runtimes._ort_runtime import OrtBackend
from automl.errors import TrialFailed
from automl.pipeline import timers as timers_module
from automl.pipeline.latency import measure_latency
from automl.pipeline.timers import bound_timers, open_runner
from automl.targets import load_target

if TYPE_CHECKING:
    from pathlib import Path

    from automl.targets import Target

FEATURES = 32


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, 10)).eval()
    path = tmp_path_factory.mktemp("timers") / "mlp.onnx"
    with warnings.catch_warnings():  # the TorchScript exporter is deprecated but plainer
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model, (torch.zeros(1, FEATURES),), str(path), dynamo=False,
            input_names=["x"], output_names=["logits"],
            dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
        )  # fmt: skip
    return path


@pytest.fixture
def rows() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((8, FEATURES), dtype=np.float32)


@pytest.fixture
def bound_cpu(scratch_catalog: None) -> Target:
    """The cpu target with a backend that times the CPU as GPU backends time a GPU."""

    class OrtCpuBound(OrtBackend):
        """The CPU, timed device-resident."""

        name, graphs, providers, device = "ort-cpu-bound", ("fp32",), (CPU,), "cpu"
        on_device = True
        install = "pip install onnxruntime"

    cpu = load_target("cpu")
    return dataclasses.replace(cpu, backends=(OrtCpuBound.name,), methods=("fp32",))


def test_bound_runs_give_the_outputs_of_session_run(model_path: Path, rows: np.ndarray) -> None:
    session = make_session(model_path, [CPU], 1)
    expected = session.run(None, {"x": rows})[0]
    timers = bound_timers(session, rows, "cpu")

    assert timers.device_resident() > 0
    np.testing.assert_allclose(timers.outputs()[0], expected, rtol=1e-6)
    assert timers.end_to_end() > 0  # the batch copied in again, the outputs copied back
    np.testing.assert_allclose(timers.outputs()[0], expected, rtol=1e-6)


def test_a_cpu_measurement_is_host_to_host(model_path: Path, rows: np.ndarray) -> None:
    latency = measure_latency(model_path, load_target("cpu"), rows, 4, max_runs=60, method="fp32")

    assert (latency.backend, latency.timing) == ("ort-cpu", "host")
    assert latency.end_to_end_p50_ms == latency.p50_ms
    assert latency.env["backend"] == "ort-cpu" and latency.env["timing"] == "host"


def test_a_device_resident_backend_reports_both_figures(
    model_path: Path, rows: np.ndarray, bound_cpu: Target
) -> None:
    latency = measure_latency(model_path, bound_cpu, rows, 4, max_runs=60, method="fp32")

    assert (latency.backend, latency.timing) == ("ort-cpu-bound", "device-resident")
    assert latency.end_to_end_p50_ms > 0 and latency.runs > 0
    assert latency.env["placement"] == {CPU: 3}  # Gemm, Relu, Gemm
    assert "cuda_graph_refused" not in latency.env  # no CUDA graph is tried off a GPU


def test_a_backend_is_chosen_by_the_graph_s_method(model_path: Path, rows: np.ndarray) -> None:
    runner = open_runner(model_path, load_target("cpu"), rows, 2, "int8-dynamic", None)

    assert runner.env["backend"] == "ort-cpu" and runner.end_to_end is None
    assert runner.run_once() > 0


def test_a_cuda_graph_needs_every_output_at_a_fixed_shape(tmp_path: Path) -> None:
    # A replay writes where the capture did: an output ONNX Runtime allocates per run is refused.
    import onnx

    def graph(op: str, out_type: int, out_shape: list) -> Path:
        x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])
        y = onnx.helper.make_tensor_value_info("y", out_type, out_shape)
        nodes = [onnx.helper.make_node(op, ["x"], ["y"])]
        model = onnx.helper.make_model(
            onnx.helper.make_graph(nodes, op, [x], [y]),
            opset_imports=[onnx.helper.make_opsetid("", 17)],
            ir_version=10,
        )
        onnx.save(model, tmp_path / f"{op}.onnx")
        return tmp_path / f"{op}.onnx"

    fixed = graph("Relu", onnx.TensorProto.FLOAT, ["batch", 4])
    loose = graph("NonZero", onnx.TensorProto.INT64, [2, "nonzero"])  # known after the run

    timers_module._require_fixed_outputs(make_session(fixed, [CPU], 1), 8)
    with pytest.raises(timers_module._NoCudaGraph, match="outputs y have no fixed shape"):
        timers_module._require_fixed_outputs(make_session(loose, [CPU], 1), 8)


def test_the_cuda_graph_label_needs_the_session_to_report_its_graph(model_path: Path) -> None:
    # Asking for a graph is not running one: the label follows the session's own options.
    session = make_session(model_path, [CPU], 1)

    with pytest.raises(timers_module._NoCudaGraph, match="the session reports None, not"):
        timers_module._require_cuda_graph(session, get_backend("ort-cuda"))


def test_a_graph_onnx_runtime_refuses_fails_the_trial_naming_the_provider(tmp_path: Path) -> None:
    import onnx

    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 4])
    node = onnx.helper.make_node("NoSuchOp", ["x"], ["y"], domain="automl.test")
    model = onnx.helper.make_model(
        onnx.helper.make_graph([node], "g", [x], [y]),
        opset_imports=[
            onnx.helper.make_opsetid("", 17),
            onnx.helper.make_opsetid("automl.test", 1),
        ],
    )
    onnx.save(model, tmp_path / "refused.onnx")

    with pytest.raises(
        TrialFailed, match=r"could not open this fp32 graph on CPUExecutionProvider"
    ):
        timers_module.backend_session(tmp_path / "refused.onnx", load_target("cpu"), "fp32")
