"""``ort-cuda``: ONNX Runtime's CUDA execution provider, timed device-resident."""

from __future__ import annotations

from types import MappingProxyType

from automl.catalog.runtimes._base import CUDA
from automl.catalog.runtimes._ort_runtime import OrtBackend

# The CUDA EP and cuDNN run fp32 convolutions and matmuls as TF32 by default.
NO_TF32 = MappingProxyType({"use_tf32": "0"})


class OrtCuda(OrtBackend):
    """The CUDA EP with TF32 off; inputs and outputs stay on the GPU through one IO binding,
    replayed as a CUDA graph where ONNX Runtime can capture one."""

    name = "ort-cuda"
    graphs = ("fp32", "fp16")
    providers = (CUDA,)
    device = "cuda"
    on_device = True
    install = "make install-gpu"
    session_options = MappingProxyType({CUDA: NO_TF32})
    graph_options = MappingProxyType({CUDA: {"enable_cuda_graph": "1"}})
