"""Latency backends as a table: which ONNX Runtime providers run a graph, and how it is timed.

| name             | providers      | methods                                     | timed as |
|------------------|----------------|---------------------------------------------|----------|
| ``ort-cpu``      | CPU            | fp32, fp16, int8-static/-dynamic, int4-weight | host   |
| ``ort-cuda``     | CUDA           | fp32 (TF32 off), fp16                       | device   |
| ``ort-tensorrt`` | TensorRT, CUDA | fp16, int8-trt, fp8-trt                     | device   |

**host**: numpy in, numpy out, one ``session.run`` per timed run. **device** (device-resident):
inputs and outputs stay on the GPU through one IO binding at fixed addresses, each run
synchronised, and replayed as a CUDA graph where ONNX Runtime can capture one; a second figure,
**end to end**, adds the copy of the batch to the GPU and of the outputs back (see
:mod:`automl.pipeline.timers`).

A target lists its backends in order of preference (``backends:`` in its YAML), and a trial's
method runs on the first of them that declares it (``Target.backend_for``): the backend follows
from the target and the method alone, never from what a host happens to have installed. fp32
is not a TensorRT method: TensorRT builds fp32 layers as TF32 by default.

This module is data only: it imports neither onnx nor onnxruntime, so the target registry can
check backend names at load.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from automl.errors import SpecError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

CPU, CUDA, TRT = "CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"
# The CUDA EP and cuDNN run fp32 convolutions and matmuls as TF32 by default.
_CUDA_OPTIONS = {"use_tf32": "0"}
# TensorRT's builder flags per method. Explicit QDQ (int8, fp8) is compiled as written, and the
# layers outside Q/DQ pairs may run in fp16 (TensorRT's "best" mode), never fp32 as TF32 alone.
_FP16 = {"trt_fp16_enable": "True"}
_TRT_PRECISION = {
    "fp16": _FP16,
    "int8-trt": {"trt_int8_enable": "True", **_FP16},
    "fp8-trt": _FP16,
}


@dataclass(frozen=True)
class Backend:
    """One way to run and time a quantized graph.

    Attributes:
        name: Stable name, used in target YAMLs and trial records.
        providers: The session's execution providers, in order; compute nodes must run on
            the first (see :func:`automl.pipeline.placement.check_placement`).
        methods: The quantization methods it runs (rows of :mod:`automl.pipeline.methods`).
        device: Where the graph runs: ``"cpu"`` or ``"cuda"``.
        placed_ops: Operators that, beside compute (see
            :func:`automl.pipeline.placement.is_compute`), must run on the first provider:
            TensorRT's Q/DQ nodes, which would otherwise be fake quantization on the CUDA EP.
        on_device: Timed device-resident (inputs and outputs bound on ``device``), rather than
            host to host.
        install: The command that installs its runtime, for refusals.
    """

    name: str
    providers: tuple[str, ...]
    methods: tuple[str, ...]
    device: str
    on_device: bool
    install: str
    placed_ops: tuple[str, ...] = ()

    @property
    def provider(self) -> str:
        """The provider that must run the compute nodes."""
        return self.providers[0]

    def provider_options(
        self, method: str, cache_dir: Path | None = None, *, cuda_graph: bool = False
    ) -> dict[str, dict[str, str]]:
        """Options per provider for a session of a ``method`` graph.

        Args:
            method: The graph's quantization method; it must be one of :attr:`methods`.
            cache_dir: Where TensorRT keeps its engine and timing caches (a folder of the
                stage cache); ``None`` builds every engine anew.
            cuda_graph: Replay runs as a CUDA graph (device-resident timing only).

        Raises:
            SpecError: The backend does not run ``method``.
        """
        if method not in self.methods:
            raise SpecError(
                f"backend {self.name!r} does not run method {method!r}; it runs "
                f"{', '.join(self.methods)}"
            )
        if self.provider == CPU:
            return {}
        graph = {"enable_cuda_graph": "1"} if cuda_graph and self.device == "cuda" else {}
        if self.provider == CUDA:
            return {CUDA: {**_CUDA_OPTIONS, **graph}}
        trt = {**_TRT_PRECISION[method], **({"trt_cuda_graph_enable": "True"} if graph else {})}
        if cache_dir is not None:
            folder = str(cache_dir)
            trt |= {"trt_engine_cache_enable": "True", "trt_engine_cache_path": folder}
            trt |= {"trt_timing_cache_enable": "True", "trt_timing_cache_path": folder}
        return {TRT: trt, CUDA: dict(_CUDA_OPTIONS)}


_GPU_INSTALL = "make install-gpu"
_ROWS = (
    Backend(
        "ort-cpu",
        (CPU,),
        ("fp32", "fp16", "int8-static", "int8-dynamic", "int4-weight"),
        "cpu",
        False,
        "pip install onnxruntime",
    ),
    Backend("ort-cuda", (CUDA,), ("fp32", "fp16"), "cuda", True, _GPU_INSTALL),
    Backend(
        "ort-tensorrt",
        (TRT, CUDA),
        ("fp16", "int8-trt", "fp8-trt"),
        "cuda",
        True,
        f"{_GPU_INSTALL} GPU_EXTRAS=dev,gpu,tensorrt",
        ("QuantizeLinear", "DequantizeLinear"),
    ),
)
BACKENDS = MappingProxyType({b.name: b for b in _ROWS})


def get_backend(name: str) -> Backend:
    """The backend called ``name``.

    Raises:
        SpecError: No backend has that name; the message lists the known ones.
    """
    if name not in BACKENDS:
        raise SpecError(f"unknown latency backend {name!r}; known: {', '.join(BACKENDS)}")
    return BACKENDS[name]


def first_running(backends: Sequence[str], method: str) -> Backend | None:
    """The first of ``backends`` (names) that runs ``method``; ``None`` when none does."""
    return next((b for b in map(get_backend, backends) if method in b.methods), None)
