"""A trial as a Triton Inference Server model: the ONNX Runtime backend, with the dynamic
batching and instances that its serving study found.

:func:`triton_config` writes ``config.pbtxt`` from an export's sidecar; the CLI's
``automl study export --format triton`` lays out the repository entry around it:
``<repository>/<model>/config.pbtxt`` and ``<repository>/<model>/1/model.onnx``.
"""

from __future__ import annotations

import re

# numpy dtype names of ONNX inputs and outputs → Triton's data types.
_TYPES = {
    "float32": "TYPE_FP32",
    "float16": "TYPE_FP16",
    "int64": "TYPE_INT64",
    "int32": "TYPE_INT32",
}


def model_name(study: str, trial: int) -> str:
    """A Triton model name for a study's trial: letters, digits, ``_``, ``-`` and ``.``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{study}-trial-{trial}")


def triton_config(sidecar: dict, name: str, device: str) -> str:
    """``config.pbtxt`` for the exported model described by ``sidecar``.

    The batch axis is Triton's (``max_batch_size``), so ``dims`` leave it out. A trial of a
    serving study brings its batcher (``max_batch``, ``max_queue_delay_ms``) and its instance
    count; any other trial serves at its measured batch size, one instance, the delay at 0.

    Args:
        sidecar: What :func:`automl.service.exports.export_model` returned.
        name: The model's name in the repository.
        device: ``"cpu"`` or ``"cuda"``: where the instances run.
    """
    serving = (sidecar.get("serving") or {}).get("settings") or {
        "max_batch": (sidecar.get("candidate") or {}).get("batch_size") or 1,
        "max_queue_delay_ms": 0,
        "instances": 1,
    }
    kind = "KIND_GPU" if device == "cuda" else "KIND_CPU"
    delay_us = round(serving["max_queue_delay_ms"] * 1000)
    lines = [
        f'name: "{name}"',
        'backend: "onnxruntime"',
        f"max_batch_size: {serving['max_batch']}",
        _tensors("input", [sidecar["input"]]),
        _tensors("output", [sidecar["output"]]),
        f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}",
        f"instance_group [ {{ count: {serving['instances']}, kind: {kind} }} ]",
    ]
    return "\n".join(lines) + "\n"


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
