"""What precision a TensorRT engine runs its layers in, read from the engine itself.

Q/DQ nodes placed on TensorRT and an accuracy close to the CPU's do not show that int8 or fp8
kernels ran: TensorRT picks the fastest kernel per layer, and a flag such as
``trt_fp16_enable`` only allows fp16. :func:`build_and_inspect` builds a graph as ONNX Runtime's
TensorRT provider does (its parser, the builder flags of the method's provider options) with
detailed profiling, and reads TensorRT's engine inspector; :func:`compute_layers` gives its
compute layers with the data type each takes, :func:`check_engine_precision` finds the graph's
layers among them and fails a trial whose engine runs none in its method's precision, and
:func:`profile_engine` times each layer of such an engine with TensorRT's profiler, for
per-layer methods. Needs the ``tensorrt`` package and a GPU, except for the reading of the
inspector's JSON. ONNX Runtime's own engines cannot be read so: it builds them without detailed
profiling, and their inspector lists layer names only.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from automl.catalog import get_method
from automl.errors import TrialFailed
from automl.pipeline.profile import EngineLayer, SourceGraph, engine_layer_of, quantizes_nothing

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from pathlib import Path

# TensorRT's layers that compute (fused or not), read in a layer's type, parameter type and
# tactic: the layers a method's precision is about. Reformats, Q/DQ, shuffles and constants are
# not; a Myelin "fusion" of a GEMM and its activation has neither type but a "...xmma_gemm..."
# tactic.
_COMPUTE = re.compile(r"conv|gemm|matrixmultiply|fullyconnected", re.IGNORECASE)
# Data types as "Format/Datatype" names them ("Thirty-two wide channel vectorized row major
# Int8 format", "Row major linear FP32", a Myelin layer's bare "Half", ...), the narrowest first.
_TYPES = (("fp8", r"\bfp8\b|e4m3"), ("int8", r"\bint8\b"), ("fp16", r"\bfp16\b|\bhalf\b"),
          ("bf16", r"\bbf16\b|bfloat16"), ("fp32", r"\bfp32\b|\bfloat\b"))  # fmt: skip
# The ONNX nodes a layer's metadata names (TensorRT 10, detailed profiling).
_ONNX_LAYER = re.compile(r"\[ONNX Layer: ([^\]\x1e\x1f]+)\]")


def precision_counts(computing: Iterable[EngineLayer]) -> dict[str, int]:
    """Compute layers per input data type, e.g. ``{"int8": 3, "fp16": 1}``; a layer whose type
    is not named is ``"other"``."""
    return dict(sorted(Counter(str(layer.data_type) for layer in computing).items()))


def compute_layers(inspector: Mapping[str, Any]) -> list[EngineLayer]:
    """The engine's compute layers, each with its input's data type and the ONNX nodes it
    computes (:func:`automl.pipeline.profile.engine_layer_of` finds the graph's layers among
    them).

    Args:
        inspector: ``IEngineInspector.get_engine_information(LayerInformationFormat.JSON)``,
            parsed, of an engine built with detailed profiling verbosity.

    Raises:
        ValueError: The layers carry no types: the engine was built without detailed
            profiling, so its layers are names only.
    """
    return [layer for layer in engine_layers(inspector) if layer.data_type is not None]


def engine_layers(inspector: Mapping[str, Any]) -> list[EngineLayer]:
    """Every layer of the engine, named as its profiler names it; a compute layer with the data
    type of its first input (see :func:`compute_layers`)."""
    layers = inspector.get("Layers", [])
    if any(isinstance(layer, str) for layer in layers):
        raise ValueError("the engine records layer names only: build it with detailed profiling")
    return [_engine_layer(layer, i) for i, layer in enumerate(layers)]


def _engine_layer(layer: Mapping[str, Any], index: int) -> EngineLayer:
    kind = " ".join(str(layer.get(k, "")) for k in ("LayerType", "ParameterType", "TacticName"))
    inputs = layer.get("Inputs") or [{}]
    computes = _COMPUTE.search(kind) and layer.get("Inputs")
    return EngineLayer(
        name=layer.get("Name", str(index)),
        nodes=tuple(_ONNX_LAYER.findall(str(layer.get("Metadata", "")))),
        data_type=_data_type(inputs[0].get("Format/Datatype", "")) if computes else None,
    )


def _data_type(format_name: str) -> str:
    return next((name for name, pattern in _TYPES
                 if re.search(pattern, format_name, re.IGNORECASE)), "other")  # fmt: skip


def precision_refusal(method: str, precisions: Mapping[str, int]) -> str | None:
    """Why an engine does not run ``method``'s precision; None when one compute layer does."""
    claimed = get_method(method).engine_precision
    if claimed is None or precisions.get(claimed, 0) > 0:
        return None
    return (
        f"the TensorRT engine of this {method} graph runs none of its compute layers in "
        f"{claimed} (it runs {json.dumps(precisions)}): TensorRT chose other kernels"
    )


# In the engine folder, cached with the engines it describes: the engine's compute layers. Its
# name is part of the folder's key (a folder published with another record is not reused).
ENGINE_RECORD = "layer_precision.json"


@dataclass(frozen=True)
class EnginePrecision:
    """What a graph's TensorRT engine runs its compute layers in.

    Attributes:
        counts: Compute layers per data type (see :func:`precision_counts`).
        layers: Each layer of the graph (Conv, Gemm, MatMul) that an engine layer computes, with
            that data type (several joined by ``+``).
    """

    counts: dict[str, int]
    layers: dict[str, str]

    @classmethod
    def of(cls, graph: SourceGraph, computing: Sequence[EngineLayer]) -> EnginePrecision:
        """From the engine's :func:`compute_layers`, found among the graph's layers."""
        types: dict[str, set[str]] = defaultdict(set)
        for engine_layer in computing:
            for layer in engine_layer_of(graph, engine_layer):
                types[layer].add(str(engine_layer.data_type))
        return cls(
            counts=precision_counts(computing),
            layers={
                layer: "+".join(sorted(types[layer])) for layer in graph.layers if layer in types
            },
        )


def check_engine_precision(
    onnx_path: Path,
    method: str,
    options: Mapping[str, str],
    batch: int,
    shape: tuple[int, ...],
    folder: Path | None,
) -> EnginePrecision | None:
    """What the graph's TensorRT engine runs its compute layers in, checked against ``method``.

    Read from ``folder`` (the trial's engine folder, see
    :func:`automl.trials.trial.engine_folder`) where an earlier trial wrote it, else built
    (:func:`build_and_inspect`) and written there.

    Returns:
        The precision; None without the ``tensorrt`` package.

    Raises:
        TrialFailed: The engine runs none of its compute layers in the method's precision (a
            per-layer method's graph that kept every layer claims none).
    """
    record = folder / ENGINE_RECORD if folder is not None else None
    if record is not None and record.is_file():
        computing = [EngineLayer(**{**row, "nodes": tuple(row["nodes"])})
                     for row in json.loads(record.read_text())]  # fmt: skip
    else:
        try:
            import tensorrt  # noqa: F401
        except ImportError:
            return None
        computing = compute_layers(build_and_inspect(onnx_path, options, batch, shape))
        if record is not None:
            record.write_text(json.dumps([asdict(layer) for layer in computing]))
    graph = SourceGraph(onnx_path)
    precision = EnginePrecision.of(graph, computing)
    refusal = precision_refusal(method, precision.counts)
    # A per-layer method that kept every layer has no precision of its own to show.
    if refusal and not (get_method(method).per_layer and quantizes_nothing(graph)):
        raise TrialFailed(refusal)
    return precision


def build_and_inspect(
    onnx_path: Path, options: Mapping[str, str], batch: int, shape: tuple[int, ...]
) -> dict[str, Any]:
    """Build ``onnx_path`` as ONNX Runtime's TensorRT provider would, and inspect the engine.

    Args:
        onnx_path: The graph, as a trial gives it to ONNX Runtime.
        options: The TensorRT provider's options (``trt_fp16_enable``, ``trt_int8_enable``).
        batch: The batch the engine is built for.
        shape: One sample's shape.

    Returns:
        The inspector's JSON, parsed.

    Raises:
        RuntimeError: TensorRT cannot parse or build the graph.
    """
    return _inspect(_build_engine(onnx_path, options, batch, shape))


def _inspect(engine: Any) -> dict[str, Any]:
    import tensorrt as trt

    information = engine.create_engine_inspector().get_engine_information(
        trt.LayerInformationFormat.JSON
    )
    return json.loads(information)


def profile_engine(
    onnx_path: Path, options: Mapping[str, str], batch: np.ndarray, runs: int = 10
) -> list[EngineLayer]:
    """Every layer of the graph's TensorRT engine with its mean ms per run, by TensorRT's
    profiler.

    The engine is built as :func:`build_and_inspect` builds it, for ``batch``'s shape, and run
    on ``batch`` (cast to its input's type) once untimed, then ``runs`` times. ONNX Runtime's
    profiler sees a TensorRT engine as one node; this sees its layers, with the ONNX nodes that
    the same engine's inspector says each computes (see
    :func:`automl.pipeline.profile.engine_layer_of`). Needs the ``tensorrt`` package; the
    engine's buffers are ONNX Runtime's, on the first visible GPU.

    Raises:
        RuntimeError: TensorRT cannot parse, build or run the graph, or this ONNX Runtime
            cannot hold memory on a GPU.
    """
    import onnxruntime as ort
    import tensorrt as trt

    engine = _build_engine(onnx_path, options, len(batch), tuple(batch.shape[1:]))
    context = engine.create_execution_context()
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
    if not context.set_input_shape(inputs[0], tuple(batch.shape)):
        raise RuntimeError(f"the engine of {onnx_path.name} takes no batch of {len(batch)}")
    buffers = {}
    for name in names:
        dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
        if name == inputs[0]:
            array = np.ascontiguousarray(batch, dtype=dtype)
            buffers[name] = ort.OrtValue.ortvalue_from_numpy(array, "cuda", 0)
        else:
            shape = list(context.get_tensor_shape(name))
            buffers[name] = ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, "cuda", 0)
    bindings = [buffers[n].data_ptr() for n in names]
    if not context.execute_v2(bindings):  # untimed: the first run pays for lazy set-up
        raise RuntimeError(f"TensorRT could not run the engine of {onnx_path.name}")
    collector = _layer_time_collector(trt)
    context.profiler = collector
    if not all([context.execute_v2(bindings) for _ in range(runs)]):
        raise RuntimeError(f"TensorRT could not run the engine of {onnx_path.name}")
    if not collector.total:
        raise RuntimeError(f"TensorRT's profiler reported no layer of {onnx_path.name}")
    nodes = {layer.name: layer.nodes for layer in engine_layers(_inspect(engine))}
    return [EngineLayer(name, nodes.get(name, ()), ms=ms / runs)
            for name, ms in collector.total.items()]  # fmt: skip


def _layer_time_collector(trt: Any) -> Any:
    """An ``IProfiler`` that sums each layer's reported time in ``total`` (a class made here:
    the ``tensorrt`` package is optional)."""

    class LayerTimes(trt.IProfiler):
        def __init__(self) -> None:
            trt.IProfiler.__init__(self)
            self.total: Counter[str] = Counter()

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            self.total[layer_name] += ms

    return LayerTimes()


def _build_engine(
    onnx_path: Path, options: Mapping[str, str], batch: int, shape: tuple[int, ...]
) -> Any:
    """The graph's engine, built with TensorRT's parser, the provider options' precision flags
    and detailed profiling, for batches up to ``batch``."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_path.read_bytes()):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT cannot parse {onnx_path.name}: {errors}")
    config = builder.create_builder_config()
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    for option, flag in (("trt_fp16_enable", "FP16"), ("trt_int8_enable", "INT8")):
        if str(options.get(option, "")).lower() in ("1", "true"):
            config.set_flag(getattr(trt.BuilderFlag, flag))
    profile = builder.create_optimization_profile()
    name = network.get_input(0).name
    profile.set_shape(name, (1, *shape), (batch, *shape), (batch, *shape))
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise RuntimeError(f"TensorRT cannot build an engine of {onnx_path.name}")
    return trt.Runtime(logger).deserialize_cuda_engine(plan)
