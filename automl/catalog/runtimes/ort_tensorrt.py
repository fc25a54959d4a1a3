"""``ort-tensorrt``: ONNX Runtime's TensorRT execution provider, CUDA beside it."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from automl.catalog.runtimes._base import CUDA, TRT
from automl.catalog.runtimes._ort_runtime import OrtBackend
from automl.catalog.runtimes.ort_cuda import NO_TF32

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path


class OrtTensorrt(OrtBackend):
    """TensorRT builds an engine per graph, with the precision flags its method states; the
    Q/DQ nodes must run in TensorRT, where they would otherwise be fake quantization on the CUDA
    EP. Engines and timing caches are kept in the stage cache."""

    name = "ort-tensorrt"
    graphs = ("fp16", "qdq-int8-symmetric", "qdq-fp8")
    providers = (TRT, CUDA)
    device = "cuda"
    on_device = True
    install = "make install-gpu GPU_EXTRAS=dev,gpu,tensorrt"
    placed_ops = ("QuantizeLinear", "DequantizeLinear")
    session_options = MappingProxyType({CUDA: NO_TF32})
    graph_options = MappingProxyType({TRT: {"trt_cuda_graph_enable": "True"}})

    def cache_options(self, cache_dir: Path) -> Mapping[str, Mapping[str, str]]:
        folder = str(cache_dir)
        return {
            TRT: {
                "trt_engine_cache_enable": "True",
                "trt_engine_cache_path": folder,
                "trt_timing_cache_enable": "True",
                "trt_timing_cache_path": folder,
            }
        }
