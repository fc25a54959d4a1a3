"""Per-layer evidence for mixed precision: what int8 costs each layer in accuracy, and what it
gains in time on the target.

:func:`layer_evidence` measures, for every layer (Conv, Gemm, MatMul) of an fp32 graph:

- its *sensitivity*: the accuracy drop on a validation subset when that layer alone is
  quantized, and the mean KL divergence of the outputs from fp32 (which orders layers whose
  drop is the same, zero most often on a small subset);
- its *time* in fp32 and in int8 on the target's provider, from ONNX Runtime's profiler, the
  Q/DQ and layout nodes that quantization adds counted to the layer they serve (see
  :mod:`automl.pipeline.profile`). On TensorRT both come from the engine's own profiler, and
  "fp32" is the layer outside int8 as TensorRT runs it there (fp16, where the method allows);
  the sensitivity is then measured on the graphs as written.

:func:`keep_order` ranks the layers for a per-layer method: first those that alone cost more
than the study's accuracy budget, then those that int8 does not make faster, then by
sensitivity per ms gained. A trial keeps the first ``keep_fp32`` of them
in fp32; the figures only order the proposals, and each is measured end to end like any other.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from automl.catalog import CPU, TRT, get_method
from automl.catalog.methods import pre_process
from automl.catalog.runtimes._ort import ORT_ERRORS, feed, input_dtype, input_name, make_session
from automl.errors import TrialFailed
from automl.pipeline.profile import SourceGraph, engine_layer_times, layer_times, profile_graph
from automl.pipeline.quantize import graph_input_dtype
from automl.pipeline.trt_engine import profile_engine

if TYPE_CHECKING:
    from collections.abc import Sequence

    from automl.inputs.data import Dataset
    from automl.targets import Target

VALIDATION_SUBSET = 512
_EPSILON_MS = 1e-6


@dataclass(frozen=True)
class LayerEvidence:
    """One layer's figures (see the module's docstring)."""

    name: str
    kind: str
    accuracy_drop: float
    divergence: float
    fp32_ms: float
    int8_ms: float

    @property
    def gain_ms(self) -> float:
        """What quantizing it saves per run (negative: it costs)."""
        return self.fp32_ms - self.int8_ms


def layer_evidence(
    fp32_path: Path,
    target: Target,
    data: Dataset,
    batch_size: int,
    method: str,
    *,
    optimization: str = "all",
) -> list[LayerEvidence]:
    """The evidence of every layer of ``fp32_path`` for the per-layer ``method``, its time at
    ``batch_size`` on the target.

    The graph is first pre-processed as the method's converter does, so layer names are those
    that the method keeps.
    """
    chosen = get_method(method)
    with tempfile.TemporaryDirectory(prefix="automl-layers-") as tmp:
        source = pre_process(fp32_path, Path(tmp) / "fp32.onnx")
        graph = SourceGraph(source)
        calibration = feed(data.x_calib, graph_input_dtype(source))
        full = Path(tmp) / "int8.onnx"
        chosen.convert(source, full, calibration)
        on_trt = TRT in target.backend_for(method).providers
        times = [
            _layer_times(graph, path, target, m, data.x_test, batch_size, optimization)
            for path, m in ((source, method if on_trt else "fp32"), (full, method))
        ]
        x, y = data.x_val[:VALIDATION_SUBSET], data.y_val[:VALIDATION_SUBSET]
        # TensorRT's graphs as written: the CPU's fused S8S8 kernels saturate without VNNI.
        cpu_optimization = "disable" if on_trt else "all"
        reference = _probabilities(source, x, cpu_optimization)
        evidence = []
        for name, kind in graph.layers.items():
            alone = Path(tmp) / "alone.onnx"
            chosen.convert_layers(source, alone, calibration, only=(name,))
            probabilities = _probabilities(alone, x, cpu_optimization)
            evidence.append(
                LayerEvidence(
                    name=name,
                    kind=kind,
                    accuracy_drop=_accuracy(reference, y) - _accuracy(probabilities, y),
                    divergence=_divergence(reference, probabilities),
                    fp32_ms=times[0][name],
                    int8_ms=times[1][name],
                )
            )
    return evidence


def _layer_times(
    graph: SourceGraph,
    path: Path,
    target: Target,
    method: str,
    x: np.ndarray,
    batch_size: int,
    optimization: str,
) -> dict[str, float]:
    """Ms per run of each layer of ``graph`` in ``path`` on ``method``'s backend: from ONNX
    Runtime's profiler, or on TensorRT from the engine's own (see
    :func:`automl.pipeline.trt_engine.profile_engine`)."""
    backend = target.backend_for(method)
    if not backend.profiles and TRT not in backend.providers:
        raise TrialFailed(
            f"{method} orders the layers it keeps by their time on the runtime, and runtime "
            f"{backend.name!r} times no single layer; search {method} on another runtime"
        )
    if TRT not in backend.providers:
        nodes = profile_graph(path, target, method, x, batch_size, optimization=optimization)
        return layer_times(graph, nodes)
    options = backend.provider_options(method).get(TRT, {})
    batch = np.take(x, np.arange(batch_size) % len(x), axis=0)
    try:
        return engine_layer_times(graph, profile_engine(path, options, batch))
    except ImportError as e:
        raise TrialFailed(
            f"{method} orders its layers by TensorRT's per-layer times, which need the "
            f"tensorrt package ({e}); install: {backend.install}"
        ) from e
    except ORT_ERRORS as e:  # RuntimeError among them: TensorRT's, or no memory on a GPU
        raise TrialFailed(f"TensorRT could not time the layers of this graph: {e}") from e


def keep_order(evidence: Sequence[LayerEvidence], budget: float | None = None) -> list[str]:
    """The layers in the order a per-layer method keeps them in fp32.

    First those whose quantization alone costs more accuracy than the study's ``budget`` (its
    ``accuracy_drop`` bound; the largest drop first), then those that int8 makes no faster (the
    costliest first), then the most sensitive per ms gained.
    """

    def priority(layer: LayerEvidence) -> tuple[int, float]:
        if budget is not None and layer.accuracy_drop > budget:
            return 0, -layer.accuracy_drop
        if layer.gain_ms <= 0:
            return 1, layer.gain_ms
        return 2, -(layer.accuracy_drop + layer.divergence) / max(layer.gain_ms, _EPSILON_MS)

    return [layer.name for layer in sorted(evidence, key=priority)]


def graph_accuracy(path: Path, data: Dataset) -> float:
    """The graph's accuracy on the validation split (the split ``accuracy`` is measured on),
    on the CPU."""
    return _accuracy(_probabilities(path, data.x_val), data.y_val)


def _probabilities(path: Path, x: np.ndarray, optimization: str = "all") -> np.ndarray:
    """Softmax of the graph's outputs on ``x``, on the CPU."""
    session = make_session(path, [CPU], 1, optimization=optimization)
    logits = session.run(None, {input_name(session): feed(x, input_dtype(session))})[0]
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def _accuracy(probabilities: np.ndarray, y: np.ndarray) -> float:
    return float((probabilities.argmax(axis=1) == y).mean())


def _divergence(reference: np.ndarray, other: np.ndarray) -> float:
    """Mean KL(reference ‖ other) over the samples."""
    eps = 1e-12
    return float(np.mean(np.sum(reference * np.log((reference + eps) / (other + eps)), axis=1)))
