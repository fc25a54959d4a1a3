"""A TensorRT engine's precision is read from its layers, not assumed from the method's flags."""

from __future__ import annotations

import json
import sys

import pytest

from automl.catalog import METHODS
from automl.errors import TrialFailed
from automl.pipeline.profile import EngineLayer, SourceGraph
from automl.pipeline.quantize import quantize_method
from automl.pipeline.trt_engine import (
    EnginePrecision,
    check_engine_precision,
    compute_layers,
    precision_counts,
    precision_refusal,
)


def layer(name: str, kind: str, parameter: str, data_type: str) -> dict:
    """One layer as TensorRT's engine inspector describes it with detailed profiling."""
    tensor = {"Name": f"{name}:0", "Location": "Device", "Format/Datatype": data_type}
    return {"Name": name, "LayerType": kind, "ParameterType": parameter,
            "Inputs": [tensor], "Outputs": [dict(tensor, Name=f"{name}:out")]}  # fmt: skip


INT8 = "Thirty-two wide channel vectorized row major Int8 format"
FP16 = "Two wide channel vectorized row major FP16 format"
FP32 = "Row major linear FP32"
FP8 = "Row major linear FP8 format"


def counts(inspector: dict) -> dict[str, int]:
    return precision_counts(compute_layers(inspector))


def test_compute_layers_are_counted_by_the_type_they_take() -> None:
    inspector = {"Layers": [
        layer("Reformatting CopyNode for Input Tensor 0", "Reformat", "Reformat", FP32),
        layer("/features.0/Conv + /features.1/Relu", "CaskConvolution", "Convolution", INT8),
        layer("/features.3/Conv + /features.4/Relu", "CaskConvolution", "Convolution", INT8),
        layer("/classifier/Gemm", "CaskGemmMatrixMultiply", "MatrixMultiply", FP16),
        layer("/quantize", "Scale", "Scale", FP32),  # Q/DQ and the rest are not compute
    ]}  # fmt: skip

    assert counts(inspector) == {"fp16": 1, "int8": 2}
    assert [(e.name, e.data_type) for e in compute_layers(inspector)] == [
        ("/features.0/Conv + /features.1/Relu", "int8"),
        ("/features.3/Conv + /features.4/Relu", "int8"),
        ("/classifier/Gemm", "fp16"),
    ]
    assert precision_refusal("int8-trt", counts(inspector)) is None


def test_a_myelin_fusion_computes_by_its_tactic_and_names_its_nodes_in_its_metadata() -> None:
    # As TensorRT 10 describes a GEMM fused with its activation (NVIDIA/TensorRT#4397): no
    # ParameterType, a bare data type, the ONNX nodes in the metadata.
    fused = {
        "Name": "__myl_Fc_myl0_69", "LayerType": "fusion",
        "TacticName": "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize64x64x64_by_fusion_tactic",
        "Metadata": "[ONNX Layer: /classifier/Gemm]\x1e[ONNX Layer: /classifier/Relu]",
        "Inputs": [{"Name": "x", "Format/Datatype": "Half"}],
    }  # fmt: skip
    pointwise = {"Name": "__myl_Add_myl0_70", "LayerType": "kgen", "TacticName": "__myl_Add",
                 "Inputs": [{"Name": "y", "Format/Datatype": "Float"}]}  # fmt: skip

    assert compute_layers({"Layers": [fused, pointwise]}) == [
        EngineLayer("__myl_Fc_myl0_69", ("/classifier/Gemm", "/classifier/Relu"), "fp16")
    ]
    assert counts({"Layers": [{**fused, "Inputs": [{"Format/Datatype": "BFloat16"}]}]}) == {
        "bf16": 1
    }


def test_an_fp8_graph_whose_engine_ran_fp16_is_refused_saying_what_ran() -> None:
    # TensorRT without strong typing may pick fp16 kernels for every FP8 Q/DQ convolution.
    inspector = {"Layers": [layer("/conv", "CaskConvolution", "Convolution", FP16),
                            layer("/fc", "gemm", "MatrixMultiply", FP16)]}  # fmt: skip
    precisions = counts(inspector)

    refusal = precision_refusal("fp8-trt", precisions)
    assert refusal is not None and "none of its compute layers in fp8" in refusal
    assert '{"fp16": 2}' in refusal
    ran_fp8 = {"Layers": [layer("/conv", "CaskConvolution", "Convolution", FP8)]}
    assert counts(ran_fp8) == {"fp8": 1}
    assert precision_refusal("fp8-trt", counts(ran_fp8)) is None


def test_methods_without_a_tensorrt_precision_claim_nothing() -> None:
    claims = {m.name: m.engine_precision for m in METHODS.values() if m.engine_precision}
    assert claims == {
        "int8-trt": "int8",
        "int8-trt-mixed": "int8",
        "fp8-trt": "fp8",
        "fp16": "fp16",
    }
    assert precision_refusal("fp32", {"fp32": 4}) is None


def test_an_engine_built_without_detailed_profiling_cannot_tell() -> None:
    # ONNX Runtime's own engines are built so: their inspector lists layer names only.
    with pytest.raises(ValueError, match="layer names only: build it with detailed profiling"):
        compute_layers({"Layers": ["/conv", "/fc"]})


def test_a_trial_reads_the_precision_kept_with_its_engines_per_layer_and_fails_on_none(
    exported_models, digits, tmp_path
) -> None:
    source = SourceGraph(exported_models["cnn"])
    first, second, fc = source.layers
    relu = next(n.name for n in source.consumers[source.nodes[first].output[0]])
    mixed = quantize_method(
        exported_models["cnn"], tmp_path / "mixed.onnx", "int8-trt-mixed",
        calibration=digits.x_calib, keep=[first],
    )  # fmt: skip
    # The record sits in the engine folder, published with the engines it describes: each
    # compute layer's type by the engine's layer names, which are the graph's nodes.
    engines = tmp_path / "engines"
    engines.mkdir()
    computing = [
        {"name": f"{first} + {relu}", "nodes": [], "data_type": "fp16", "ms": 0.0},
        {"name": second, "nodes": [], "data_type": "int8", "ms": 0.0},
        {"name": "__myl_Fc_myl0_0", "nodes": [fc], "data_type": "int8", "ms": 0.0},  # Myelin
    ]
    (engines / "layer_precision.json").write_text(json.dumps(computing))
    args = ({"trt_int8_enable": "True", "trt_fp16_enable": "True"}, 8, (1, 8, 8), engines)

    precision = check_engine_precision(mixed.path, "int8-trt-mixed", *args)
    assert precision == EnginePrecision(
        counts={"fp16": 1, "int8": 2}, layers={first: "fp16", second: "int8", fc: "int8"}
    )
    with pytest.raises(TrialFailed, match="none of its compute layers in fp8"):
        check_engine_precision(mixed.path, "fp8-trt", *args)


def test_a_mixed_graph_that_kept_every_layer_claims_no_int8(exported_models, digits, tmp_path):
    layers = list(SourceGraph(exported_models["cnn"]).layers)
    ran_fp16 = [{"name": name, "nodes": [], "data_type": "fp16", "ms": 0.0} for name in layers]
    (tmp_path / "layer_precision.json").write_text(json.dumps(ran_fp16))
    args = ({"trt_int8_enable": "True", "trt_fp16_enable": "True"}, 8, (1, 8, 8), tmp_path)

    def check(keep: list[str]) -> EnginePrecision | None:
        mixed = quantize_method(
            exported_models["cnn"], tmp_path / "mixed.onnx", "int8-trt-mixed",
            calibration=digits.x_calib, keep=keep,
        )  # fmt: skip
        return check_engine_precision(mixed.path, "int8-trt-mixed", *args)

    assert check(layers).counts == {"fp16": 3}  # no Q/DQ left: nothing to run in int8
    with pytest.raises(TrialFailed, match="none of its compute layers in int8"):
        check(layers[:2])  # the third is quantized, and ran fp16


def test_without_the_tensorrt_package_nothing_is_recorded(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # import tensorrt raises ImportError
    options = {"trt_int8_enable": "True"}

    assert check_engine_precision(tmp_path / "g.onnx", "int8-trt", options, 8, (64,), None) is None
