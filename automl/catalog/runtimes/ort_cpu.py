"""``ort-cpu``: ONNX Runtime's CPU execution provider, timed host to host."""

from __future__ import annotations

from automl.catalog.runtimes._base import CPU
from automl.catalog.runtimes._ort_runtime import OrtBackend


class OrtCpu(OrtBackend):
    """The CPU EP; numpy in, numpy out, one ``session.run`` per timed run."""

    name = "ort-cpu"
    graphs = ("fp32", "fp16", "qdq-int8", "dynamic-int8", "matmul-nbits")
    providers = (CPU,)
    device = "cpu"
    on_device = False
    install = "pip install onnxruntime"
