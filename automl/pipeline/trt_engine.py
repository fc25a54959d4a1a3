"""What precision a TensorRT engine runs its layers in, read from the engine itself.

Q/DQ nodes placed on TensorRT and an accuracy close to the CPU's do not show that int8 or fp8
kernels ran: TensorRT picks the fastest kernel per layer, and a flag such as
``trt_fp16_enable`` only allows fp16. :func:`build_and_inspect` builds a graph as ONNX Runtime's
TensorRT provider does (its parser, the builder flags of the method's provider options) with
detailed profiling, and reads TensorRT's engine inspector; :func:`compute_precisions` counts the
compute layers by the data type they take, and :func:`check_engine_precision` fails a trial whose
engine runs none in its method's precision. Needs the ``tensorrt`` package and a GPU, except for
the counting, which reads the inspector's JSON. ONNX Runtime's own engines cannot be read so: it
builds them without detailed profiling, and their inspector lists layer names only.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import TYPE_CHECKING, Any

from automl.errors import TrialFailed

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

# The precision each TensorRT method claims to run its convolutions and matrix products in.
CLAIMED = {"int8-trt": "int8", "fp8-trt": "fp8", "fp16": "fp16"}
# TensorRT's layer and parameter types that compute (fused or not): the layers a method's
# precision is about. Reformats, Q/DQ, shuffles and constants are not.
_COMPUTE = re.compile(r"conv|gemm|matrixmultiply|fullyconnected", re.IGNORECASE)
# Data types as "Format/Datatype" names them ("Thirty-two wide channel vectorized row major
# Int8 format", "Row major linear FP32", ...), the narrowest first.
_TYPES = (("fp8", r"\bfp8\b|e4m3"), ("int8", r"\bint8\b"), ("fp16", r"\bfp16\b|\bhalf\b"),
          ("bf16", r"\bbf16\b"), ("fp32", r"\bfp32\b|\bfloat\b"))  # fmt: skip


def compute_precisions(inspector: Mapping[str, Any]) -> dict[str, int]:
    """Compute layers per input data type, from the engine inspector's JSON.

    Args:
        inspector: ``IEngineInspector.get_engine_information(LayerInformationFormat.JSON)``,
            parsed, of an engine built with detailed profiling verbosity.

    Returns:
        E.g. ``{"int8": 3, "fp16": 1}``; a layer whose type is not named is ``"other"``.

    Raises:
        ValueError: The layers carry no types: the engine was built without detailed
            profiling, so its layers are names only.
    """
    layers = inspector.get("Layers", [])
    if any(isinstance(layer, str) for layer in layers):
        raise ValueError("the engine records layer names only: build it with detailed profiling")
    counts: Counter[str] = Counter()
    for layer in layers:
        kind = f"{layer.get('LayerType', '')} {layer.get('ParameterType', '')}"
        if _COMPUTE.search(kind) and layer.get("Inputs"):
            counts[_data_type(layer["Inputs"][0].get("Format/Datatype", ""))] += 1
    return dict(sorted(counts.items()))


def _data_type(format_name: str) -> str:
    return next((name for name, pattern in _TYPES
                 if re.search(pattern, format_name, re.IGNORECASE)), "other")  # fmt: skip


def precision_refusal(method: str, precisions: Mapping[str, int]) -> str | None:
    """Why an engine does not run ``method``'s precision; None when one compute layer does."""
    claimed = CLAIMED.get(method)
    if claimed is None or precisions.get(claimed, 0) > 0:
        return None
    return (
        f"the TensorRT engine of this {method} graph runs none of its compute layers in "
        f"{claimed} (it runs {json.dumps(precisions)}): TensorRT chose other kernels"
    )


_RECORD = "precision.json"  # in the engine folder: cached with the engines it describes


def check_engine_precision(
    onnx_path: Path,
    method: str,
    options: Mapping[str, str],
    batch: int,
    shape: tuple[int, ...],
    folder: Path | None,
) -> dict[str, int] | None:
    """Compute layers per data type of the graph's TensorRT engine, checked against ``method``.

    Read from ``folder`` (the trial's engine folder, see
    :func:`automl.trials.trial.engine_folder`) where an earlier trial wrote it, else built
    (:func:`build_and_inspect`) and written there.

    Returns:
        The counts (see :func:`compute_precisions`); None without the ``tensorrt`` package.

    Raises:
        TrialFailed: The engine runs none of its compute layers in the method's precision.
    """
    record = folder / _RECORD if folder is not None else None
    if record is not None and record.is_file():
        precisions = json.loads(record.read_text())
    else:
        try:
            import tensorrt  # noqa: F401
        except ImportError:
            return None
        precisions = compute_precisions(build_and_inspect(onnx_path, options, batch, shape))
        if record is not None:
            record.write_text(json.dumps(precisions))
    if refusal := precision_refusal(method, precisions):
        raise TrialFailed(refusal)
    return precisions


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
    engine = trt.Runtime(logger).deserialize_cuda_engine(plan)
    information = engine.create_engine_inspector().get_engine_information(
        trt.LayerInformationFormat.JSON
    )
    return json.loads(information)
