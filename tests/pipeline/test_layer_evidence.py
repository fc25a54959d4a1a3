"""Per-layer evidence of a real trained graph, its ordering, and the mixed method it orders."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import onnx
import pytest

from automl.errors import SpecError, TrialFailed
from automl.pipeline.layer_evidence import LayerEvidence, keep_order, layer_evidence
from automl.pipeline.profile import EngineLayer
from automl.pipeline.quantize import quantize_method
from automl.targets import load_target

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(scope="module")
def evidence(exported_models, digits) -> list[LayerEvidence]:
    return layer_evidence(exported_models["cnn"], load_target("cpu"), digits, 8, "int8-mixed")


def test_every_layer_has_its_sensitivity_and_its_time(evidence) -> None:
    assert [row.kind for row in evidence] == ["Conv", "Conv", "Gemm"]
    for row in evidence:
        assert row.divergence >= 0 and -1 <= row.accuracy_drop <= 1
        assert row.fp32_ms > 0 and row.int8_ms > 0
    assert any(row.divergence > 0 for row in evidence)  # int8 moved some outputs


def _row(name: str, drop: float, fp32_ms: float, int8_ms: float) -> LayerEvidence:
    return LayerEvidence(name, "Conv", drop, 0.0, fp32_ms, int8_ms)


def test_layers_that_int8_does_not_speed_up_are_kept_first_then_by_cost_per_ms() -> None:
    rows = [
        _row("cheap", 0.001, 1.0, 0.5),  # 0.002 per ms gained
        _row("slower", 0.0, 1.0, 1.4),  # int8 costs 0.4 ms
        _row("touchy", 0.02, 1.0, 0.5),  # 0.04 per ms gained
        _row("worse", 0.0, 1.0, 2.0),  # int8 costs 1 ms
    ]
    assert keep_order(rows) == ["worse", "slower", "touchy", "cheap"]


def _fp32_layers(path) -> set[str]:
    """The Conv/Gemm nodes whose weight is a plain initializer (no DequantizeLinear)."""
    graph = onnx.load(str(path)).graph
    weights = {i.name for i in graph.initializer}
    return {n.name for n in graph.node if n.op_type in ("Conv", "Gemm") and n.input[1] in weights}


@pytest.mark.parametrize("method", ["int8-mixed", "int8-trt-mixed"])
def test_the_mixed_method_keeps_the_named_layers_and_only_those(
    exported_models, digits, evidence, tmp_path, method
) -> None:
    kept = keep_order(evidence)[:1]
    mixed = quantize_method(
        exported_models["cnn"], tmp_path / "mixed.onnx", method,
        calibration=digits.x_calib, keep=kept,
    )  # fmt: skip
    assert _fp32_layers(mixed.path) == set(kept)
    full = quantize_method(
        exported_models["cnn"], tmp_path / "full.onnx", method, calibration=digits.x_calib
    )
    assert _fp32_layers(full.path) == set()
    with pytest.raises(SpecError, match=r"quantizes the whole graph.*int8-mixed"):
        quantize_method(
            exported_models["cnn"], tmp_path / "s.onnx", "int8-static",
            calibration=digits.x_calib, keep=kept,
        )  # fmt: skip


def test_a_layer_that_alone_breaks_the_accuracy_budget_is_kept_first() -> None:
    rows = [_row("slower", 0.0, 1.0, 1.4), _row("costly", 0.02, 1.0, 0.1)]  # 0.02 per ms
    assert keep_order(rows) == ["slower", "costly"]
    assert keep_order(rows, budget=0.01) == ["costly", "slower"]  # 2 points > a 1-point budget


@pytest.fixture(scope="module")
def padded_net(digits, tmp_path_factory) -> Path:
    """A net whose first conv pads by replicating edges: a Pad node stands before it."""
    import torch
    from torch import nn

    from automl.pipeline.export import export_onnx

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1, padding_mode="replicate"), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10),
    ).eval()  # fmt: skip
    path = tmp_path_factory.mktemp("padded") / "padded.onnx"
    return export_onnx(model, digits.x_test[:64], path).path


def _quantized_tensors(path) -> set[str]:
    graph = onnx.load(str(path)).graph
    return {n.input[0] for n in graph.node if n.op_type == "QuantizeLinear"}


def test_a_kept_layer_reads_its_input_in_fp32_through_the_nodes_before_it(
    padded_net, digits, tmp_path
) -> None:
    layers = [
        n.name for n in onnx.load(str(padded_net)).graph.node if n.op_type in ("Conv", "Gemm")
    ]
    first = quantize_method(
        padded_net, tmp_path / "first.onnx", "int8-mixed",
        calibration=digits.x_calib, keep=layers[:1],
    )  # fmt: skip
    assert _fp32_layers(first.path) == set(layers[:1])
    assert "input" not in _quantized_tensors(first.path)  # the Pad before it stays fp32 too
    every = quantize_method(
        padded_net, tmp_path / "every.onnx", "int8-mixed",
        calibration=digits.x_calib, keep=layers,
    )  # fmt: skip
    assert _quantized_tensors(every.path) == set()  # no ReLU, pooling or Pad between them either


def test_a_node_after_a_quantized_layer_stays_quantized_with_it(padded_net, digits, tmp_path):
    graph = onnx.load(str(padded_net)).graph
    layers = [n.name for n in graph.node if n.op_type in ("Conv", "Gemm")]
    relu = next(n.output[0] for n in graph.node if n.op_type == "Relu")  # after the first conv
    second = quantize_method(
        padded_net, tmp_path / "second.onnx", "int8-mixed",
        calibration=digits.x_calib, keep=layers[1:2],
    )  # fmt: skip
    assert _fp32_layers(second.path) == set(layers[1:2])
    # The first conv's output is int8-rounded anyway; its ReLU stays fused with it.
    assert relu in _quantized_tensors(second.path)


_PROFILED: list = []  # (options, batch shape) of each call of _engine_times


def _engine_times(path: Path, options: dict, batch) -> list[EngineLayer]:
    """What TensorRT's profiler reports for ``path`` (needs a GPU): here, each Conv or Gemm in
    a Myelin layer that its metadata names, 1 ms when its weight is int8 (behind a
    DequantizeLinear), else 3."""
    graph = onnx.load(str(path)).graph
    dequantized = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear"}
    _PROFILED.append((dict(options), batch.shape))
    return [
        EngineLayer(f"__myl_{i}_myl0_{i}", (n.name,), ms=1.0 if n.input[1] in dequantized else 3.0)
        for i, n in enumerate(graph.node)
        if n.op_type in ("Conv", "Gemm")
    ]


def test_on_tensorrt_the_layers_are_timed_by_the_engine_profiler(
    exported_models, digits, monkeypatch
) -> None:
    monkeypatch.setattr("automl.pipeline.layer_evidence.profile_engine", _engine_times)
    _PROFILED.clear()
    rows = layer_evidence(exported_models["cnn"], load_target("a100"), digits, 8, "int8-trt-mixed")

    assert [(r.fp32_ms, r.int8_ms) for r in rows] == [(3.0, 1.0)] * 3
    # Both forms are built with the method's flags (outside int8, TensorRT may run fp16).
    flags = {"trt_int8_enable": "True", "trt_fp16_enable": "True"}
    assert [(options.items() >= flags.items(), shape[0]) for options, shape in _PROFILED] == [
        (True, 8),
        (True, 8),
    ]
    assert all(-1 <= r.accuracy_drop <= 1 and r.divergence >= 0 for r in rows)


def test_without_tensorrt_a_per_layer_trt_method_fails_naming_the_install(
    exported_models, digits, monkeypatch
) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # import tensorrt raises ImportError
    with pytest.raises(TrialFailed, match=r"tensorrt package.*GPU_EXTRAS=dev,gpu,tensorrt"):
        layer_evidence(exported_models["cnn"], load_target("a100"), digits, 8, "int8-trt-mixed")
