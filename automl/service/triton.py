"""A trial as a Triton Inference Server model: the backend of the runtime it was measured on
(ONNX Runtime's, or OpenVINO's for a trial measured on OpenVINO), with the dynamic batching and
instances that its serving study found, and the session settings it was measured with.

:func:`triton_config` writes ``config.pbtxt`` from an export's sidecar; the CLI's
``automl study export --format triton`` lays out the repository entry around it:
``<repository>/<model>/config.pbtxt`` and ``<repository>/<model>/1/model.onnx``.
"""

from __future__ import annotations

import re

from automl.errors import SpecError

# numpy dtype names of ONNX inputs and outputs → Triton's data types.
_TYPES = {
    "float32": "TYPE_FP32",
    "float16": "TYPE_FP16",
    "int64": "TYPE_INT64",
    "int32": "TYPE_INT32",
}


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # whole name: it is a folder of the repository
# ONNX Runtime's graph optimisation levels as the backend's optimization.graph.level gives them;
# "all", the backend's default, goes unsaid.
_GRAPH_LEVELS = {"basic": -1, "extended": 1, "disable": 2}
# The compiled model's settings (automl.catalog.runtimes.openvino) that the OpenVINO backend
# takes as parameters, and those it has none for (its CPU pins threads by default, and may run
# fp32 graphs in bf16 where the CPU has it).
_OPENVINO = ("PERFORMANCE_HINT", "NUM_STREAMS")
_NOT_SET = ("ENABLE_CPU_PINNING", "INFERENCE_PRECISION_HINT")
_FILE = "model.onnx"  # the backend's default is model.xml, OpenVINO's own format


def model_name(given: str | None, study: str) -> str:
    """The Triton model name: ``given``, else the study's, so that exporting another trial of
    the study keeps the name that clients call.

    Raises:
        SpecError: ``given`` is not a name Triton's repository can hold.
    """
    if given is None:
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", study)
    if not _NAME.fullmatch(given):
        raise SpecError(
            f"--model-name {given!r}: a Triton model name is letters, digits, '_', '.' and "
            "'-', starting with a letter or digit (it names the model's folder)"
        )
    return given


def triton_config(sidecar: dict, name: str, device: str) -> str:
    """``config.pbtxt`` for the exported model described by ``sidecar``.

    The batch axis is Triton's (``max_batch_size``), so ``dims`` leave it out. A trial of a
    serving study brings its batcher (``max_batch``, ``max_queue_delay_ms``) and its instance
    count; any other trial serves at its measured batch size, one instance, the delay at 0.
    Each instance's ONNX Runtime session gets the threads, the sequential execution and the
    graph optimisation level that the trial was measured with (see :func:`_session`); a trial
    measured on OpenVINO (the sidecar's ``runtime``) is served by Triton's ``openvino`` backend,
    reading the ONNX file, with its threads, hint and streams as measured (see
    :func:`_openvino`).

    Args:
        sidecar: What :func:`automl.service.exports.export_model` returned.
        name: The model's name in the repository.
        device: ``"cpu"`` or ``"cuda"``: where the instances run.
    """
    served = (sidecar.get("serving") or {}).get("settings")
    serving = served or {
        "max_batch": (sidecar.get("candidate") or {}).get("batch_size") or 1,
        "max_queue_delay_ms": 0,
        "instances": 1,
    }
    kind = "KIND_GPU" if device == "cuda" else "KIND_CPU"
    delay_us = round(serving["max_queue_delay_ms"] * 1000)
    runtime = sidecar.get("runtime") or {}
    instances = served["instances"] if served else None
    env = sidecar.get("env") or {}
    if runtime.get("name") == "openvino":
        backend = ['backend: "openvino"', f'default_model_filename: "{sidecar.get("file", _FILE)}"']
        settings = _openvino(env, runtime.get("settings") or {}, instances)
    else:
        backend, settings = ['backend: "onnxruntime"'], _session(env, instances)
    lines = [
        f'name: "{name}"',
        *backend,
        f"max_batch_size: {serving['max_batch']}",
        _tensors("input", [sidecar["input"]]),
        _tensors("output", [sidecar["output"]]),
        f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}",
        f"instance_group [ {{ count: {serving['instances']}, kind: {kind} }} ]",
        *settings,
    ]
    return "\n".join(lines) + "\n"


def _session(env: dict, instances: int | None) -> list[str]:
    """The backend's session settings as the trial measured: its intra-op threads per
    instance, one inter-op thread, sequential execution, its graph optimisation level.

    A trial served under load (``instances`` given) split the target's threads between its
    instances, at least one each, as :func:`automl.pipeline.serving.measure_serving` does; any
    other trial ran one session on all of them (0: ONNX Runtime's choice, which the backend
    reads 0 as too).
    """
    threads = env.get("intra_op_threads")
    if threads is None:
        lines = ["# the trial recorded no thread count: ONNX Runtime's defaults apply"]
    else:
        per_instance = threads if instances is None else max(1, threads // instances)
        lines = [
            "# as measured; Triton ignores these under --backend-config=onnxruntime,"
            "enable-global-threadpool=1",
            _parameter("intra_op_thread_count", per_instance),
            _parameter("inter_op_thread_count", 1),
            _parameter("execution_mode", 0),  # sequential: inter-op threads stay unused
        ]
    level = _GRAPH_LEVELS.get(env.get("graph_optimization") or "all")
    if level is not None:
        lines.append(f"optimization {{ graph {{ level: {level} }} }}")
    return lines


def _openvino(env: dict, settings: dict, instances: int | None) -> list[str]:
    """The OpenVINO backend's parameters as the trial measured: its threads per instance (split
    as :func:`_session` splits them), its performance hint and streams, and a shorter batch
    padded to ``max_batch_size``, which the backend compiles for as the trial compiled for its
    batch (unpadded, the backend refuses any other batch). The backend has no parameter for
    pinning or for fp32 precision: a comment says what the trial ran with.
    """
    threads = env.get("intra_op_threads")
    lines = [f"# measured with {key} {settings[key]}: the backend has no parameter for it"
             for key in _NOT_SET if key in settings]  # fmt: skip
    if threads is None:
        lines.append("# the trial recorded no thread count: OpenVINO's defaults apply")
    else:
        per_instance = threads if instances is None else max(1, threads // instances)
        lines.append(_parameter("INFERENCE_NUM_THREADS", per_instance))
    lines += [_parameter(key, settings[key]) for key in _OPENVINO if key in settings]
    return [*lines, _parameter("ENABLE_BATCH_PADDING", "YES")]


def _parameter(key: str, value: int | str) -> str:
    return f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}'


def _tensors(kind: str, tensors: list[dict]) -> str:
    entries = []
    for tensor in tensors:
        dims = ", ".join(
            str(d) if isinstance(d, int) and d > 0 else "-1" for d in tensor["shape"][1:]
        )
        entries.append(
            f'  {{ name: "{tensor["name"]}", data_type: {_TYPES[tensor["dtype"]]}, dims: [ {dims} ] }}'
        )
    return f"{kind} [\n" + ",\n".join(entries) + "\n]"
