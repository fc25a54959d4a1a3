"""Node placement: recorded by every session, and checked against the target's provider."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np
import onnxruntime as ort
import pytest

from automl.catalog import get_backend
from automl.catalog.runtimes._ort import make_session
from automl.catalog.runtimes._ort_runtime import OrtBackend
from automl.catalog.runtimes._placement import (
    NodePlacement,
    check_placement,
    is_compute,
    node_placements,
    placement_counts,
)
from automl.errors import AutomlError, TrialFailed
from automl.pipeline.latency import measure_latency
from automl.pipeline.quantize import quantize
from automl.targets import load_target

if TYPE_CHECKING:
    from pathlib import Path

CPU = "CPUExecutionProvider"


@pytest.mark.parametrize(
    "op_type",
    [
        *("Conv", "Gemm", "MatMul", "FusedConv", "FusedMatMul", "ConvInteger", "MatMulInteger"),
        *("QLinearConv", "QLinearMatMul", "QGemm", "MatMulNBits", "DynamicQuantizeMatMul"),
        *("MaxPool", "GlobalAveragePool", "QLinearAveragePool", "BatchNormalization"),
        *("LayerNormalization", "Softmax", "Relu", "Gelu", "Attention"),
    ],
)
def test_compute_operators(op_type: str) -> None:
    assert is_compute(op_type)


@pytest.mark.parametrize(
    "op_type", ["Add", "Cast", "MemcpyToHost", "QuantizeLinear", "Flatten", "Reshape", "Gather"]
)
def test_other_operators_may_run_anywhere(op_type: str) -> None:
    assert not is_compute(op_type)


def test_a_cpu_session_records_every_node_on_the_cpu(exported_models) -> None:
    session = make_session(exported_models["mlp"], [CPU], 1)

    placements = node_placements(session)

    assert {p.provider for p in placements} == {CPU}
    assert [p.op_type for p in placements] == ["Flatten", "Gemm", "Relu", "Gemm"]
    assert check_placement(placements, CPU) == {CPU: 4}


def test_compute_on_another_provider_fails_the_trial_naming_the_nodes(
    digits, exported_models, tmp_path: Path
) -> None:
    # int8 dynamic, the graph the CUDA provider cannot run: expected on CUDA, it runs on the CPU.
    path = quantize(exported_models["cnn"], tmp_path / "q8.onnx", 8, int8_mode="dynamic").path
    placements = node_placements(make_session(path, [CPU], 1))

    with pytest.raises(TrialFailed) as info:
        check_placement(placements, "CUDAExecutionProvider")

    message = str(info.value)
    assert "compute node(s) do not run on CUDAExecutionProvider" in message
    for conv in ("/features/features.0/Conv_quant", "/features/features.3/Conv_quant"):
        assert f"ConvInteger '{conv}' on CPUExecutionProvider" in message
    assert "MatMulInteger '/classifier/Gemm_MatMul_quant' on CPUExecutionProvider" in message


def test_pooling_or_softmax_off_the_device_fails_as_compute_does() -> None:
    placements = [
        NodePlacement("CUDAExecutionProvider", "Conv", "conv"),
        NodePlacement(CPU, "MaxPool", "pool"),  # copied to the host and back around it
        NodePlacement(CPU, "Shape", "shape"),  # ONNX Runtime's choice for shape arithmetic
        NodePlacement("CUDAExecutionProvider", "Gemm", "fc"),
        NodePlacement(CPU, "Softmax", "softmax"),
    ]
    with pytest.raises(TrialFailed, match=r"2 compute node\(s\) .*MaxPool 'pool'.*Softmax"):
        check_placement(placements, "CUDAExecutionProvider")


def test_a_long_list_of_stray_nodes_is_cut() -> None:
    placements = [NodePlacement(CPU, "Conv", f"conv{i}") for i in range(13)]

    with pytest.raises(TrialFailed, match=r"'conv9' on CPUExecutionProvider and 3 more\."):
        check_placement(placements, "TensorrtExecutionProvider")


def test_on_tensorrt_q_dq_nodes_must_run_there_too() -> None:
    # A Q/DQ pair that TensorRT did not take runs as fake quantization on the CUDA provider.
    trt, cuda = "TensorrtExecutionProvider", "CUDAExecutionProvider"
    placements = [NodePlacement(trt, "Conv", "conv"), NodePlacement(cuda, "QuantizeLinear", "q")]
    qdq = get_backend("ort-tensorrt").placed_ops

    assert check_placement(placements, trt) == {cuda: 1, trt: 1}
    with pytest.raises(TrialFailed, match=r"^1 compute or QuantizeLinear or DequantizeLinear "):
        check_placement(placements, trt, qdq)


def test_counts_are_per_provider() -> None:
    placements = [
        NodePlacement("CUDAExecutionProvider", "Conv", "a"),
        NodePlacement(CPU, "Shape", "b"),
        NodePlacement("CUDAExecutionProvider", "Relu", "c"),
    ]

    assert check_placement(placements, "CUDAExecutionProvider") == {
        CPU: 1,
        "CUDAExecutionProvider": 2,
    }
    assert placement_counts([]) == {}


def test_a_session_that_does_not_record_is_refused(exported_models) -> None:
    session = ort.InferenceSession(str(exported_models["mlp"]), providers=[CPU])

    with pytest.raises(AutomlError, match="does not record node placement"):
        node_placements(session)


@pytest.mark.skipif(
    "AzureExecutionProvider" not in ort.get_available_providers(),
    reason="this ONNX Runtime has no second provider to register first",
)
def test_the_registered_provider_is_not_where_nodes_run(digits, exported_models, scratch_catalog):
    # The Azure provider registers first and takes no node: get_providers()[0] names it while
    # the CPU runs everything, as the CUDA provider does with an int8 dynamic graph.
    class OrtAzure(OrtBackend):
        """Azure first, the CPU behind it."""

        name, graphs, device = "ort-azure", ("fp32",), "cpu"
        providers = ("AzureExecutionProvider", CPU)
        install = "-"

    cpu = load_target("cpu")
    target = dataclasses.replace(cpu, backends=(OrtAzure.name,), methods=("fp32",))
    session = make_session(exported_models["mlp"], OrtAzure.providers, 1)
    assert session.get_providers()[0] == "AzureExecutionProvider"

    with pytest.raises(TrialFailed, match=r"Gemm '/features/features\.1/Gemm' on CPU"):
        measure_latency(session, target, digits.x_test, 1, min_runs=10, method="fp32")


def test_a_measurement_records_its_placement(digits, exported_models) -> None:
    lat = measure_latency(
        exported_models["cnn"], load_target("cpu"), digits.x_test, 1, method="fp32"
    )

    assert lat.env["placement"] == {CPU: 7}  # 2 × (Conv, Relu), pool, Flatten, Gemm


def test_the_fallback_to_the_cpu_is_disabled(exported_models) -> None:
    session = make_session(exported_models["mlp"], [CPU], 1)
    x = np.zeros((1, 1, 8, 8), np.float32)

    # With fallback enabled, ORT's Python run would retry a failing provider on the CPU alone.
    assert not session._enable_fallback
    assert session.run(None, {"input": x})[0].shape == (1, 10)


def test_copies_at_the_graph_s_edges_pass_and_copies_inside_it_fail() -> None:
    from automl.catalog.runtimes._placement import check_copies

    cuda = "CUDAExecutionProvider"
    edges = [
        NodePlacement(CPU, "MemcpyFromHost", "in"),
        NodePlacement(cuda, "Conv", "conv"),
        NodePlacement(CPU, "MemcpyToHost", "out"),
    ]
    check_copies(edges, inputs=1, outputs=1)  # one copy in, one copy out
    # A pool on the host between two device convs: a copy out and a copy back in, inside.
    inside = [
        *edges[:2],
        NodePlacement(CPU, "MemcpyToHost", "to-pool"),
        NodePlacement(CPU, "MaxPool", "pool"),
        NodePlacement(CPU, "MemcpyFromHost", "from-pool"),
        NodePlacement(cuda, "Conv", "conv2"),
        edges[2],
    ]
    with pytest.raises(TrialFailed, match=r"1 MemcpyFromHost, 1 MemcpyToHost node\(s\) copy"):
        check_copies(inside, inputs=1, outputs=1)
