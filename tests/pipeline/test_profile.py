"""ONNX Runtime's profile of a real graph, given back to the layers of its source graph."""

from __future__ import annotations

import onnx
import pytest

from automl.pipeline.profile import (
    OTHER,
    EngineLayer,
    NodeTime,
    SourceGraph,
    engine_layer_of,
    engine_layer_times,
    explain_no_gain,
    layer_times,
    op_times,
    profile_graph,
)
from automl.pipeline.quantize import quantize_method
from automl.targets import load_target


@pytest.fixture(scope="module")
def profiles(exported_models, digits, tmp_path_factory) -> dict:
    """The CNN's fp32 and int8-static graphs, profiled at batch 8 on the CPU."""
    fp32 = exported_models["cnn"]
    int8 = quantize_method(
        fp32, tmp_path_factory.mktemp("profile") / "int8.onnx", "int8-static",
        calibration=digits.x_calib,
    )  # fmt: skip
    cpu = load_target("cpu")
    return {
        "graph": SourceGraph(fp32),
        "fp32": profile_graph(fp32, cpu, "fp32", digits.x_test, 8),
        "int8": profile_graph(int8.path, cpu, "int8-static", digits.x_test, 8),
    }


def test_every_layer_of_the_source_graph_is_found_with_its_kind(profiles) -> None:
    graph = profiles["graph"]
    assert set(graph.layers.values()) == {"Conv", "Gemm"}
    assert sum(kind == "Conv" for kind in graph.layers.values()) == 2


def test_profiled_time_goes_to_the_layers_in_both_forms(profiles) -> None:
    graph = profiles["graph"]
    for form in ("fp32", "int8"):
        nodes = profiles[form]
        times = layer_times(graph, nodes)
        assert all(times[layer] > 0 for layer in graph.layers), (form, times)
        assert sum(times.values()) == pytest.approx(sum(n.ms for n in nodes))
    int8_ops = op_times(profiles["int8"])
    assert "QLinearConv" in int8_ops and "QuantizeLinear" in int8_ops
    assert list(int8_ops.values()) == sorted(int8_ops.values(), reverse=True)


def test_renamed_and_added_nodes_find_their_layer(profiles) -> None:
    graph = profiles["graph"]
    first_conv = next(iter(graph.layers))
    gemm = next(name for name, kind in graph.layers.items() if kind == "Gemm")
    relu_out = next(n.output[0] for n in graph.nodes.values() if n.op_type == "Relu")

    def layer(name: str) -> str:
        return graph.layer_of(NodeTime(name, "?", 1.0))

    assert layer(f"{first_conv}") == first_conv  # a converted node keeps its name
    assert layer("input_QuantizeLinear") == first_conv  # quantizes what the first conv reads
    assert layer("logits_DequantizeLinear") == gemm  # dequantizes what the classifier wrote
    assert layer(relu_out) in graph.layers  # a fused conv + relu, named by its output
    assert layer("ReorderOutput") == OTHER


def test_a_graph_that_did_not_pay_is_explained_from_its_profile(profiles) -> None:
    note = explain_no_gain(profiles["graph"], profiles["int8"], profiles["fp32"], 0.8)
    assert note.startswith("quantized but not faster (gain 0.80×)")
    assert "quantize, dequantize and cast nodes take" in note


def test_a_trace_without_run_marks_counts_every_run() -> None:
    from automl.pipeline.profile import _node_times

    event = {"cat": "Node", "name": "conv_kernel_time", "ts": 5, "dur": 3000,
             "args": {"op_name": "Conv"}}  # fmt: skip
    assert _node_times([event, {**event, "ts": 9}], runs=2) == [NodeTime("conv", "Conv", 2.0)]


def test_tensorrt_layer_names_find_the_source_layers_they_compute(
    exported_models, digits, tmp_path
) -> None:
    # TensorRT's parser names an engine's layers by the ONNX nodes they fuse, joined by " + ".
    source = SourceGraph(exported_models["cnn"])
    first, second, fc = source.layers
    relu1, relu2 = (next(n.name for n in source.consumers[source.nodes[conv].output[0]])
                    for conv in (first, second))  # fmt: skip
    int8 = quantize_method(
        exported_models["cnn"], tmp_path / "int8.onnx", "int8-trt", calibration=digits.x_calib
    )
    quantize = f"{source.nodes[fc].input[0]}_QuantizeLinear"  # the Q before the Gemm
    assert quantize in {n.name for n in onnx.load(str(int8.path)).graph.node}
    layers = [
        EngineLayer(f"{first} + {relu1}", ms=2.0),
        EngineLayer(f"Reformatting CopyNode for Input Tensor 0 to {first} + {relu1}", ms=0.5),
        EngineLayer(f"PWN({relu2})", ms=0.25),  # a pointwise fusion: the layer that feeds it
        EngineLayer(f"{quantize}_clone_0", ms=0.125),  # a Q/DQ copy: the layer its tensor feeds
        EngineLayer(f"{second} + {fc}", ms=1.0),  # two layers in one kernel share its time
        EngineLayer("Reformatting CopyNode for Output Tensor 0 to 7", ms=0.0625),  # no layer
    ]

    assert engine_layer_of(source, layers[2]) == [second]
    assert engine_layer_of(source, layers[4]) == [second, fc]
    assert engine_layer_of(source, layers[5]) == []
    assert engine_layer_times(source, layers) == {
        first: 2.5, second: 0.25 + 0.5, fc: 0.125 + 0.5, OTHER: 0.0625
    }  # fmt: skip
    # TensorRT 10's Myelin names no node ("." turned "_", a suffix added): its metadata does.
    myelin = f"{fc.replace('.', '_')}_myl0_3"
    assert engine_layer_of(source, EngineLayer(myelin)) == []
    assert engine_layer_of(source, EngineLayer(myelin, nodes=(fc,))) == [fc]
    foreign = EngineLayer(f"{{ForeignNode[{second}...{fc}]}}", nodes=(second, relu2, fc))
    assert engine_layer_of(source, foreign) == [second, fc]
