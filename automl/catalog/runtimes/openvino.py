"""``openvino``: Intel's OpenVINO runtime on the CPU, compiling the trial's ONNX graph as written.

An fp32 graph, or the QDQ int8 graph that ONNX Runtime's CPU recipe writes (OpenVINO folds the
Q/DQ pairs into int8 kernels), is read from the ONNX file, reshaped to the trial's fixed batch
and compiled with the target's threads, the latency hint, one stream, fp32 as the inference
precision (no silent bf16) and pinning off: on a shared host its default pinning made batch-1
wall time 3-4 times its CPU time. Which layers ran in int8 is read from the compiled model's
runtime info.
"""

from __future__ import annotations

import functools
import types
from typing import TYPE_CHECKING, Any

import numpy as np

from automl.catalog.runtimes._base import Backend
from automl.errors import TargetUnavailable, TrialFailed

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

DEVICE = "CPU"
# ONNX's element types, named as ONNX Runtime names them, by OpenVINO's.
_TYPES = {"f32": "tensor(float)", "f16": "tensor(float16)", "f64": "tensor(double)",
          "i64": "tensor(int64)", "i32": "tensor(int32)"}  # fmt: skip
# The operations of a read model that are a graph's layers (Conv, Gemm and MatMul in ONNX).
_LAYERS = ("Convolution", "GroupConvolution", "MatMul", "ConvolutionBackpropData")
# The compiled kernels that run a layer (under the name of their output, at times).
_KERNELS = ("Convolution", "FullyConnected", "MatMul", "GroupConvolution", "Deconvolution")


@functools.cache
def _core() -> Any:
    import openvino as ov

    return ov.Core()


class OpenVino(Backend):
    """OpenVINO on the host CPU, compiled for the trial's batch: fp32 graphs, and QDQ int8
    graphs run as int8 kernels."""

    name = "openvino"
    graphs = ("fp32", "qdq-int8")
    providers = ("OpenVINO:CPU",)
    device = "cpu"
    install = "pip install 'automl[openvino]'"
    package = "openvino"

    def unavailable(self) -> str | None:
        """``None`` where the openvino package imports and lists the CPU."""
        try:
            devices = _core().available_devices
        except ImportError as e:
            return f"the openvino package is not installed ({e}); install: {self.install}"
        except RuntimeError as e:  # the runtime failed to load its plugins
            return f"OpenVINO could not start: {e}"
        return None if DEVICE in devices else f"OpenVINO lists no CPU device here ({devices})"

    def open_session(
        self,
        model_path: Path | str,
        method: str,
        *,
        threads: int,
        batch_size: int | None = None,
        cache_dir: Path | None = None,
        optimization: str = "all",
    ) -> OpenVinoSession:
        """The graph compiled for ``batch_size`` (dynamic where ``None``); ``optimization`` is
        ONNX Runtime's and does not apply. ``cache_dir`` keeps the compiled blobs."""
        self.refuse_method(method)
        if reason := self.unavailable():
            raise TargetUnavailable(f"runtime {self.name!r} cannot start: {reason}")
        core = _core()
        config: dict[str, Any] = {
            "PERFORMANCE_HINT": "LATENCY",
            "NUM_STREAMS": 1,
            "ENABLE_CPU_PINNING": False,
            "INFERENCE_PRECISION_HINT": "f32",
        }
        if threads > 0:
            config["INFERENCE_NUM_THREADS"] = threads
        if cache_dir is not None:
            config["CACHE_DIR"] = str(cache_dir)
        try:
            model = core.read_model(str(model_path))
            if batch_size is not None:
                model.reshape({port: _fixed(port, batch_size) for port in model.inputs})
            layers = {op.get_friendly_name() for op in model.get_ordered_ops()
                      if op.get_type_name() in _LAYERS}  # fmt: skip
            compiled = core.compile_model(model, DEVICE, config)
        except RuntimeError as e:
            raise TrialFailed(
                f"OpenVINO could not compile this {method} graph: {type(e).__name__}: {e}"
            ) from e
        return OpenVinoSession(compiled, batch_size, layers)

    def placement(self, session: Any) -> dict[str, int]:
        """The graph's layers per compiled operation and its precision (``Convolution:u8``,
        ``Subgraph:f32`` for layers fused into one kernel): which ran in int8."""
        if not isinstance(session, OpenVinoSession):
            raise TargetUnavailable(f"this session is a {type(session).__name__}, not OpenVINO's")
        return session.layer_precisions()

    def environment(self, session: Any) -> dict[str, Any]:
        """OpenVINO's version, the device, and the compiled model's settings."""
        import openvino as ov

        return {"openvino": ov.__version__, "provider": self.provider,
                "openvino_config": session.settings()}  # fmt: skip


def _fixed(port: Any, batch_size: int) -> list[int]:
    """The port's shape with the batch fixed; its other dimensions must be static."""
    shape = port.get_partial_shape()
    rest = [d.get_length() if d.is_static else None for d in list(shape)[1:]]
    if None in rest:
        raise TrialFailed(f"input {port.get_any_name()} has a dynamic dimension besides the batch")
    return [batch_size, *rest]


class OpenVinoSession:
    """A compiled model, called as ONNX Runtime's session is (see
    :class:`automl.catalog.Session`). Compiled for a fixed batch, it pads a shorter feed and
    splits a longer one."""

    def __init__(self, compiled: Any, batch_size: int | None, layers: set[str]) -> None:
        self._compiled = compiled
        self._layers = layers
        self._request = compiled.create_infer_request()
        self._batch = batch_size
        self._inputs = [p.get_any_name() for p in compiled.inputs]
        self._outputs = [p.get_any_name() for p in compiled.outputs]

    def get_inputs(self) -> list[types.SimpleNamespace]:
        """The inputs: name, ONNX type and shape (the batch as compiled)."""
        return [_port(p) for p in self._compiled.inputs]

    def get_outputs(self) -> list[types.SimpleNamespace]:
        """The outputs, as :meth:`get_inputs`."""
        return [_port(p) for p in self._compiled.outputs]

    def run(self, output_names: Sequence[str] | None, feed: Mapping[str, np.ndarray]) -> list:
        """The outputs of ``feed``, in the graph's order (only ``output_names`` if given)."""
        arrays = {i: feed[name] for i, name in enumerate(self._inputs)}
        n = len(arrays[0])
        if self._batch is None or n == self._batch:  # the timed path: one request, no copies in
            outputs = list(self._request.infer(arrays, share_inputs=True).to_tuple())
        else:
            parts = [self._padded({i: a[k : k + self._batch] for i, a in arrays.items()})
                     for k in range(0, n, self._batch)]  # fmt: skip
            outputs = [np.concatenate(chunks)[:n] for chunks in zip(*parts, strict=True)]
        if output_names is None:
            return outputs
        return [outputs[self._outputs.index(name)] for name in output_names]

    def _padded(self, arrays: dict[int, np.ndarray]) -> tuple:
        """One request on a batch shorter than the compiled one, padded with zeros."""
        pad = self._batch - len(arrays[0])
        full = {i: np.concatenate([a, np.zeros((pad, *a.shape[1:]), a.dtype)]) if pad else a
                for i, a in arrays.items()}  # fmt: skip
        return self._request.infer(full).to_tuple()

    def layer_precisions(self) -> dict[str, int]:
        """The graph's layers per ``type:precision`` of the compiled operation that ran them."""
        counts: dict[str, int] = {}
        for op in self._compiled.get_runtime_model().get_ordered_ops():
            info = op.get_rt_info()
            names = info["originalLayersNames"].astype(str).split(",")
            ran = {layer for layer in self._layers
                   for name in names if name == layer or name.startswith(f"{layer}/")}  # fmt: skip
            kind = info["layerType"].astype(str)
            if n := max(len(ran), kind in _KERNELS):
                key = f"{kind}:{info['runtimePrecision'].astype(str)}"
                counts[key] = counts.get(key, 0) + n
        return counts

    def settings(self) -> dict[str, str]:
        """The compiled model's settings that change its speed, as it reports them."""
        keys = ("INFERENCE_NUM_THREADS", "PERFORMANCE_HINT", "NUM_STREAMS",
                "ENABLE_CPU_PINNING", "INFERENCE_PRECISION_HINT")  # fmt: skip
        return {k: _text(self._compiled.get_property(k)) for k in keys} | {
            "batch": str(self._batch or "dynamic")
        }


def _port(port: Any) -> types.SimpleNamespace:
    element = port.get_element_type().get_type_name()
    shape = [d.get_length() if d.is_static else None for d in list(port.get_partial_shape())]
    return types.SimpleNamespace(
        name=port.get_any_name(), type=_TYPES.get(element, element), shape=shape
    )


def _text(value: Any) -> str:
    """A compiled model's property as OpenVINO's own config names it (``f32``, not a Type)."""
    return value.get_type_name() if hasattr(value, "get_type_name") else str(value)
