"""Quantize stage: an fp32 ONNX model in, the same model made by a named method out.

The methods are the entries of the catalog (:data:`automl.catalog.METHODS`), each with its own
converter.
:func:`quantize_method` takes a method's name; :func:`quantize` keeps the old form, a bit-width
and an ``int8_mode``.

Every result takes the input of its fp32 graph (float32 features, or int64 token ids) and
returns float32 logits, so callers feed the same arrays to all of them. Calibration samples are
cast to that input's type.
Failures inside the ONNX Runtime tools become :class:`UnsupportedQuantization` (cause chained),
so a study can record them as a failed trial and go on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper

from automl.catalog import get_method, method_for
from automl.catalog.methods import tool_failure
from automl.catalog.runtimes._ort import feed
from automl.errors import SpecError

if TYPE_CHECKING:
    from collections.abc import Sequence


@dataclass(frozen=True)
class QuantizedModel:
    """A quantized ONNX artifact.

    Attributes:
        path: The ONNX file written.
        bits: The method's bit-width (32, 16, 8 or 4).
        method: The name of the method that made it (see :data:`automl.catalog.METHODS`).
        size_bytes: Size of the file on disk.
    """

    path: Path
    bits: int
    method: str
    size_bytes: int


def quantize(
    model_path: Path | str,
    out_path: Path | str,
    bits: int,
    *,
    calibration: np.ndarray | None = None,
    int8_mode: str = "static",
) -> QuantizedModel:
    """Write ``model_path`` quantized to ``bits`` at ``out_path``.

    Args:
        model_path: A self-contained fp32 ONNX model (no external data) with one input.
        out_path: Where to write the result; parent folders are created.
        bits: 32, 16, 8 or 4.
        calibration: Samples shaped ``(N, *input_shape)`` (floats, or token ids for an int64
            input); required for 8-bit static.
        int8_mode: ``"static"`` (QDQ, calibrated) or ``"dynamic"``; used only when ``bits`` is 8.

    Returns:
        The written model's path, bit-width, method and size.

    Raises:
        SpecError: ``int8_mode`` is unknown, static 8-bit is asked without calibration data, or
            ``calibration`` is empty or not batched.
        UnsupportedQuantization: ``bits`` is not supported, 4-bit finds no eligible MatMul/Gemm
            weight, or an ONNX Runtime tool failed on this graph.
    """
    return quantize_method(
        model_path, out_path, method_for(bits, int8_mode).name, calibration=calibration
    )


def quantize_method(
    model_path: Path | str,
    out_path: Path | str,
    method: str,
    *,
    calibration: np.ndarray | None = None,
    keep: Sequence[str] = (),
) -> QuantizedModel:
    """Write ``model_path`` quantized by the named method at ``out_path``.

    Args:
        model_path: A self-contained fp32 ONNX model (no external data) with one input.
        out_path: Where to write the result; parent folders are created.
        method: A method's name, e.g. ``"int8-static"`` (see :data:`automl.catalog.METHODS`).
        calibration: Samples shaped ``(N, *input_shape)`` (floats, or token ids for an int64
            input); required by the methods that need calibration.
        keep: Layers (node names of the graph) to leave in fp32; only a per-layer method
            (e.g. ``int8-mixed``) takes them.

    Returns:
        The written model's path, bit-width, method and size.

    Raises:
        SpecError: The method is unknown, needs calibration data and has none, or
            ``calibration`` is empty or not batched; or ``keep`` is given to a method that
            quantizes the whole graph.
        UnsupportedQuantization: 4-bit finds no eligible MatMul/Gemm weight, or an ONNX Runtime
            tool failed on this graph.
    """
    src, dst, chosen = Path(model_path), Path(out_path), get_method(method)
    if chosen.needs_calibration and calibration is None:
        alternative = ", or use int8_mode='dynamic'" if chosen.name == "int8-static" else ""
        raise SpecError(
            f"method {chosen.name!r} needs calibration data: pass calibration=<array "
            f"(N, *input_shape)>{alternative}"
        )
    if calibration is not None:
        calibration = np.asarray(calibration)
        if calibration.ndim < 2 or len(calibration) == 0:
            raise SpecError(
                f"calibration must be a non-empty (N, *input_shape) array, not {calibration.shape}"
            )
        calibration = feed(calibration, graph_input_dtype(src))
    dst.parent.mkdir(parents=True, exist_ok=True)
    if keep:
        chosen.convert_layers(src, dst, calibration, keep=keep)
    else:
        chosen.convert(src, dst, calibration)
    with tool_failure("onnx.checker on the quantized model"):
        onnx.checker.check_model(str(dst))
    return QuantizedModel(
        path=dst, bits=chosen.bits, method=chosen.name, size_bytes=dst.stat().st_size
    )


def graph_input_dtype(path: Path) -> type:
    """The numpy dtype of the graph's input (float32 for features, int64 for token ids)."""
    graph = onnx.load(str(path), load_external_data=False).graph
    weights = {i.name for i in graph.initializer}
    (value,) = (v for v in graph.input if v.name not in weights)
    return helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).type
