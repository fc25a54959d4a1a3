"""A trial as a Triton model: config.pbtxt pins the session as the trial was measured."""

from __future__ import annotations

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

from automl.errors import SpecError
from automl.service.triton import model_name, triton_config

IO = {
    "input": {"name": "input", "dtype": "float32", "shape": ["batch", 1, 8, 8]},
    "output": {"name": "logits", "dtype": "float32", "shape": ["batch", 10]},
}
SERVED = {"settings": {"max_batch": 16, "max_queue_delay_ms": 0.5, "instances": 2}}
# An OpenVINO trial's runtime, as its sidecar gives it (the compiled model's settings).
OPENVINO = {
    "name": "openvino",
    "version": "2026.4.1",
    "settings": {"INFERENCE_NUM_THREADS": "4", "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1",
                 "ENABLE_CPU_PINNING": "False", "INFERENCE_PRECISION_HINT": "f32", "batch": "8"},
}  # fmt: skip

# The fields of Triton's ModelConfig that the exports write, with their numbers and types as
# triton-inference-server/common's model_config.proto (package inference) declares them:
# message -> (field, number, type, repeated, message or enum type).
_S, _I32, _U64, _I64, _MSG, _ENUM = 9, 5, 4, 3, 11, 14
_SCHEMA = {
    "ModelConfig": [
        ("name", 1, _S), ("backend", 17, _S), ("max_batch_size", 4, _I32),
        ("input", 5, _MSG, True, "ModelInput"), ("output", 6, _MSG, True, "ModelOutput"),
        ("dynamic_batching", 11, _MSG, False, "ModelDynamicBatching"),
        ("instance_group", 7, _MSG, True, "ModelInstanceGroup"),
        ("default_model_filename", 8, _S),
        ("parameters", 14, _MSG, True, "ModelConfig.ParametersEntry"),
        ("optimization", 12, _MSG, False, "ModelOptimizationPolicy"),
    ],
    "ModelConfig.ParametersEntry": [("key", 1, _S), ("value", 2, _MSG, False, "ModelParameter")],
    "ModelParameter": [("string_value", 1, _S)],
    "ModelInput": [("name", 1, _S), ("data_type", 2, _ENUM, False, "DataType"),
                   ("dims", 4, _I64, True)],
    "ModelOutput": [("name", 1, _S), ("data_type", 2, _ENUM, False, "DataType"),
                    ("dims", 3, _I64, True)],
    "ModelDynamicBatching": [("max_queue_delay_microseconds", 2, _U64)],
    "ModelInstanceGroup": [("count", 2, _I32), ("kind", 4, _ENUM, False, "ModelInstanceGroup.Kind")],
    "ModelOptimizationPolicy": [("graph", 1, _MSG, False, "ModelOptimizationPolicy.Graph")],
    "ModelOptimizationPolicy.Graph": [("level", 1, _I32)],
}  # fmt: skip
_ENUMS = {
    "DataType": ["TYPE_INVALID", "TYPE_BOOL", "TYPE_UINT8", "TYPE_UINT16", "TYPE_UINT32",
                 "TYPE_UINT64", "TYPE_INT8", "TYPE_INT16", "TYPE_INT32", "TYPE_INT64",
                 "TYPE_FP16", "TYPE_FP32", "TYPE_FP64", "TYPE_STRING", "TYPE_BF16"],
    "ModelInstanceGroup.Kind": ["KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL"],
}  # fmt: skip


def _model_config_class() -> type:
    """Triton's ``inference.ModelConfig`` message (the part in :data:`_SCHEMA`), built with
    protobuf's own descriptors: tritonclient's generated one needs protobuf < 7."""
    file = descriptor_pb2.FileDescriptorProto(name="model_config.proto", package="inference")
    file.syntax = "proto3"
    made: dict[str, descriptor_pb2.DescriptorProto] = {}
    for name in _SCHEMA | _ENUMS:
        outer, _, inner = name.rpartition(".")
        parent = made[outer].nested_type if outer else file.message_type
        if name in _ENUMS:
            enums = made[outer].enum_type if outer else file.enum_type
            values = [{"name": v, "number": i} for i, v in enumerate(_ENUMS[name])]
            enums.add(name=inner, value=values)
            continue
        made[name] = parent.add(name=inner)
        made[name].options.map_entry = name.endswith("Entry")
    for name, fields in _SCHEMA.items():
        for field, number, kind, *more in fields:
            added = made[name].field.add(name=field, number=number, type=kind, label=1)
            if more and more[0]:
                added.label = 3  # repeated
            if len(more) > 1:
                added.type_name = f".inference.{more[1]}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("inference.ModelConfig"))


def model_config(config: str):
    """``config.pbtxt`` parsed as Triton reads it: an unknown field, a wrong type or a syntax
    error raises ``text_format.ParseError``."""
    return text_format.Parse(config, _model_config_class()())


def _parameters(config: str) -> dict[str, str]:
    lines = [line for line in config.splitlines() if line.startswith("parameters {")]
    return {line.split('"')[1]: line.split('"')[3] for line in lines}


def test_a_trial_runs_its_measured_threads_in_sequence():
    env = {"intra_op_threads": 4, "graph_optimization": "all"}
    config = triton_config({**IO, "env": env, "candidate": {"batch_size": 8}}, "m", "cpu")
    assert _parameters(config) == {
        "intra_op_thread_count": "4",
        "inter_op_thread_count": "1",
        "execution_mode": "0",
    }
    assert "max_batch_size: 8\n" in config and "count: 1, kind: KIND_CPU" in config
    assert "optimization" not in config  # "all" is the backend's default
    assert model_config(config).backend == "onnxruntime"


def test_a_served_trial_splits_its_threads_between_instances_as_measured():
    env = {"intra_op_threads": 4, "graph_optimization": "basic"}
    config = triton_config({**IO, "env": env, "serving": SERVED}, "m", "cuda")
    assert _parameters(config)["intra_op_thread_count"] == "2"  # 4 threads, 2 instances
    assert "count: 2, kind: KIND_GPU" in config and "max_queue_delay_microseconds: 500 }" in config
    assert "optimization { graph { level: -1 } }" in config  # the backend's name for basic
    assert model_config(config).optimization.graph.level == -1
    one = triton_config({**IO, "env": {"intra_op_threads": 1}, "serving": SERVED}, "m", "cpu")
    assert _parameters(one)["intra_op_thread_count"] == "1"  # at least one each


def test_an_openvino_trial_is_served_by_the_openvino_backend_as_measured():
    sidecar = {**IO, "env": {"intra_op_threads": 4}, "runtime": OPENVINO, "file": "model.onnx"}
    config = triton_config({**sidecar, "candidate": {"batch_size": 8}}, "m", "cpu")
    parsed = model_config(config)
    assert (parsed.backend, parsed.default_model_filename) == ("openvino", "model.onnx")
    assert _parameters(config) == {
        "INFERENCE_NUM_THREADS": "4",
        "PERFORMANCE_HINT": "LATENCY",
        "NUM_STREAMS": "1",
        "ENABLE_BATCH_PADDING": "YES",  # compiled for max_batch_size, as the trial for its batch
    }
    assert parsed.max_batch_size == 8 and list(parsed.input[0].dims) == [1, 8, 8]
    assert "# measured with ENABLE_CPU_PINNING False" in config and "optimization" not in config
    served = triton_config({**sidecar, "serving": SERVED}, "m", "cpu")
    assert _parameters(served)["INFERENCE_NUM_THREADS"] == "2"  # 4 threads, 2 instances
    assert model_config(served).instance_group[0].count == 2


def test_a_trial_without_a_thread_count_says_so():
    config = triton_config({**IO, "env": {}}, "m", "cpu")
    assert _parameters(config) == {} and "recorded no thread count" in config


def test_the_model_is_named_after_the_study_unless_a_name_is_given():
    assert model_name(None, "digits-serving-cpu") == "digits-serving-cpu"
    assert model_name("digits", "digits-serving-cpu") == "digits"
    with pytest.raises(SpecError, match=r"--model-name 'a/b': a Triton model name is letters"):
        model_name("a/b", "s")
