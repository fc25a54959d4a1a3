"""``ort-cpu``: ONNX Runtime's CPU execution provider, timed host to host."""

from __future__ import annotations

from automl.catalog._registry import CPU, Backend


class OrtCpu(Backend):
    """The CPU EP; numpy in, numpy out, one ``session.run`` per timed run."""

    name = "ort-cpu"
    providers = (CPU,)
    device = "cpu"
    on_device = False
    install = "pip install onnxruntime"
