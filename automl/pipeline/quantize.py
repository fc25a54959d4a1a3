"""Quantize stage: an fp32 ONNX model in, the same model made by a named method out.

The methods (``fp32``, ``fp16``, ``int8-static``, ``int8-dynamic``, ``int4-weight``,
``int8-trt``, ``fp8-trt``) are the rows of :mod:`automl.pipeline.methods`; each names its
converter here.
:func:`quantize_method` takes a method's name; :func:`quantize` keeps the old form, a bit-width
and an ``int8_mode``.

Every result takes the input of its fp32 graph (float32 features, or int64 token ids) and
returns float32 logits, so callers feed the same arrays to all of them. Calibration samples are
cast to that input's type.
Failures inside the ONNX Runtime tools become :class:`UnsupportedQuantization` (cause chained),
so a study can record them as a failed trial and go on.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import warnings
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper, numpy_helper

from automl.errors import SpecError, UnsupportedQuantization
from automl.pipeline._ort import feed
from automl.pipeline.methods import BITS, get_method, method_for

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

SUPPORTED_BITS = BITS

# MatMulNBits blocks are powers of two of at least 16; a weight needs K >= 16 to fill one.
_MIN_NBITS_K = 16
_CALIBRATION_BATCH = 128
# quantize_static's warnings about what a recipe intends (see _quiet_expected_warnings).
_EXPECTED_WARNINGS = ("is out-of-range for weight", "does not support quantization to float 8")


@dataclass(frozen=True)
class QuantizedModel:
    """A quantized ONNX artifact.

    Attributes:
        path: The ONNX file written.
        bits: The method's bit-width (32, 16, 8 or 4).
        method: The name of the method that made it (see :mod:`automl.pipeline.methods`).
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
) -> QuantizedModel:
    """Write ``model_path`` quantized by the named method at ``out_path``.

    Args:
        model_path: A self-contained fp32 ONNX model (no external data) with one input.
        out_path: Where to write the result; parent folders are created.
        method: A method's name, e.g. ``"int8-static"`` (see :mod:`automl.pipeline.methods`).
        calibration: Samples shaped ``(N, *input_shape)`` (floats, or token ids for an int64
            input); required by the methods that need calibration.

    Returns:
        The written model's path, bit-width, method and size.

    Raises:
        SpecError: The method is unknown, needs calibration data and has none, or
            ``calibration`` is empty or not batched.
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
        calibration = feed(calibration, _input_dtype(src))
    dst.parent.mkdir(parents=True, exist_ok=True)
    _CONVERTERS[chosen.converter](src, dst, calibration)
    with _tool_failure("onnx.checker on the quantized model"):
        onnx.checker.check_model(str(dst))
    return QuantizedModel(
        path=dst, bits=chosen.bits, method=chosen.name, size_bytes=dst.stat().st_size
    )


@contextmanager
def _tool_failure(step: str) -> Iterator[None]:
    """Re-raise any failure of a third-party tool as UnsupportedQuantization."""
    try:
        yield
    # The ORT tools raise anything from AssertionError to RuntimeError on graphs they can't handle.
    except Exception as e:
        raise UnsupportedQuantization(f"{step} failed: {type(e).__name__}: {e}") from e


def _to_fp16(src: Path, dst: Path) -> None:
    from onnxconverter_common import float16

    with _tool_failure("fp16 conversion"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # tiny weights truncated to fp16's range
        model = float16.convert_float_to_float16(onnx.load(src), keep_io_types=True)
        onnx.save(model, dst)


class _ArrayReader:
    """CalibrationDataReader over an in-memory array, in fixed-size batches."""

    def __init__(self, input_name: str, data: np.ndarray) -> None:
        batches = (
            data[i : i + _CALIBRATION_BATCH] for i in range(0, len(data), _CALIBRATION_BATCH)
        )
        self._feeds = iter([{input_name: b} for b in batches])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def _input_dtype(path: Path) -> type:
    """The numpy dtype of the graph's input (float32 for features, int64 for token ids)."""
    graph = onnx.load(str(path), load_external_data=False).graph
    weights = {i.name for i in graph.initializer}
    (value,) = (v for v in graph.input if v.name not in weights)
    return helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).type


def _input_name(model: onnx.ModelProto) -> str:
    initializers = {i.name for i in model.graph.initializer}
    return next(i.name for i in model.graph.input if i.name not in initializers)


def _to_int8_static(src: Path, dst: Path, calibration: np.ndarray) -> None:
    # U8S8, the CPU EP's fast path; 7-bit weights, see the int8-static row of the methods table.
    _to_qdq(src, dst, calibration, activations="QUInt8", reduce_range=True)


def _to_int8_trt(src: Path, dst: Path, calibration: np.ndarray) -> None:
    # TensorRT's explicit quantization: signed, symmetric int8 (zero points 0), per-channel
    # weights; biases stay float, as TensorRT has no int32 dequantization to fold them from.
    _to_qdq(
        src,
        dst,
        calibration,
        activations="QInt8",
        extra={"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False},
    )


def _to_fp8_trt(src: Path, dst: Path, calibration: np.ndarray) -> None:
    # TensorRT's FP8 explicit quantization (Hopper): E4M3 weights and activations, zero points 0,
    # float bias; ORT calibrates float8 only by Distribution (scale = std / std of E4M3). Without
    # ActivationSymmetric, ORT drops each Relu before a Q as if 0 were the type's minimum, which
    # it is not in E4M3. (The CPU EP's ReluQuantRewrite does the same at load: disable it there.)
    _to_qdq(
        src,
        dst,
        calibration,
        activations="QFLOAT8E4M3FN",
        weights="QFLOAT8E4M3FN",
        calibrate="Distribution",
        extra={"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False},
    )


def _to_qdq(
    src: Path,
    dst: Path,
    calibration: np.ndarray,
    *,
    activations: str,
    weights: str = "QInt8",
    calibrate: str = "MinMax",
    reduce_range: bool = False,
    extra: dict[str, bool] | None = None,
) -> None:
    """Static QDQ quantization with per-channel weights, calibrated on ``calibration``.

    ``activations`` and ``weights`` name a ``QuantType``, ``calibrate`` a ``CalibrationMethod``.
    """
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    with tempfile.TemporaryDirectory() as tmp:
        pre = _pre_process(src, Path(tmp) / "pre.onnx")
        reader = _ArrayReader(_input_name(onnx.load(pre)), calibration)
        with _tool_failure("onnxruntime quantize_static"), _quiet_expected_warnings():
            quantize_static(
                pre,
                dst,
                reader,
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                reduce_range=reduce_range,
                weight_type=getattr(QuantType, weights),
                activation_type=getattr(QuantType, activations),
                calibrate_method=getattr(CalibrationMethod, calibrate),
                extra_options=extra or {},
            )


@contextmanager
def _quiet_expected_warnings() -> Iterator[None]:
    """Drop two root-logger warnings of ``quantize_static`` about what is intended.

    Per-channel QDQ has no channel axis for a 1-D weight (a LayerNorm's scale), so ORT quantizes
    it per tensor and warns once per layer; float8 needs opset 19, so ORT raises the opset and
    warns. The Distribution calibrator's progress lines go to stderr, off the CLI's stdout.
    """

    def keep(record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(w in message for w in _EXPECTED_WARNINGS)

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        with redirect_stdout(sys.stderr):
            yield
    finally:
        root.removeFilter(keep)


def _to_int8_dynamic(src: Path, dst: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        pre = _pre_process(src, Path(tmp) / "pre.onnx")
        with _tool_failure("onnxruntime quantize_dynamic"):
            quantize_dynamic(pre, dst, weight_type=QuantType.QInt8)


def _pre_process(src: Path, dst: Path) -> Path:
    """Shape inference and graph cleanup that ORT recommends before int8 quantization."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with _tool_failure("onnxruntime quant_pre_process"):
        quant_pre_process(src, dst)
    return dst


def _to_int4(src: Path, dst: Path) -> None:
    # The module calls logging.basicConfig(level=INFO) on import; a placeholder root handler
    # makes that a no-op, and its own logger, which reports every node at INFO, is quieted.
    placeholder = logging.NullHandler()
    logging.getLogger().addHandler(placeholder)
    try:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    finally:
        logging.getLogger().removeHandler(placeholder)
    logging.getLogger(MatMulNBitsQuantizer.__module__).setLevel(logging.WARNING)

    model = _gemm_to_matmul(onnx.load(src))
    eligible, excluded = _split_matmuls(model)
    block_size = 32 if all(k >= 32 for k in eligible.values()) else 16
    with _tool_failure("onnxruntime MatMulNBitsQuantizer"):
        quantizer = MatMulNBitsQuantizer(
            model, bits=4, block_size=block_size, is_symmetric=True, nodes_to_exclude=excluded
        )
        quantizer.process()
        quantized = quantizer.model.model
    if not any(n.op_type == "MatMulNBits" for n in quantized.graph.node):
        raise UnsupportedQuantization(
            "4-bit is weight-only MatMulNBits, and this graph has no eligible MatMul/Gemm "
            f"(a constant 2-D weight with K >= {_MIN_NBITS_K}); Conv layers cannot be 4-bit"
        )
    onnx.save(quantized, dst)


def _split_matmuls(model: onnx.ModelProto) -> tuple[dict[str, int], list[str]]:
    """Name every MatMul, and split them into eligible (name → K) and excluded names."""
    weights = {i.name: i for i in model.graph.initializer}
    eligible: dict[str, int] = {}
    excluded: list[str] = []
    for index, node in enumerate(model.graph.node):
        if node.op_type != "MatMul":
            continue
        node.name = node.name or f"matmul_{index}"
        weight = weights.get(node.input[1])
        if weight is not None and len(weight.dims) == 2 and weight.dims[0] >= _MIN_NBITS_K:
            eligible[node.name] = weight.dims[0]
        else:
            excluded.append(node.name)
    return eligible, excluded


def _gemm_to_matmul(model: onnx.ModelProto) -> onnx.ModelProto:
    """Rewrite plain ``Gemm`` (torch ``Linear``) as ``MatMul`` + ``Add``, which MatMulNBits takes.

    Only Gemm with alpha = beta = 1, no transA, and constant B (and C, if any) is rewritten;
    others are kept and so stay fp32.
    """
    weights = {i.name: i for i in model.graph.initializer}
    transposed: dict[str, str] = {}
    nodes: list[onnx.NodeProto] = []
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        plain = (
            node.op_type == "Gemm"
            and attrs.get("alpha", 1.0) == 1.0
            and attrs.get("beta", 1.0) == 1.0
            and not attrs.get("transA", 0)
            and node.input[1] in weights
            and (len(node.input) < 3 or not node.input[2] or node.input[2] in weights)
        )
        if not plain:
            nodes.append(node)
            continue
        kn = node.input[1]
        if attrs.get("transB", 0):
            if kn not in transposed:
                w = np.ascontiguousarray(numpy_helper.to_array(weights[kn]).T)
                transposed[kn] = f"{kn}_kn"
                model.graph.initializer.append(numpy_helper.from_array(w, transposed[kn]))
            kn = transposed[kn]
        name = node.name or f"gemm_{len(nodes)}"
        has_bias = len(node.input) > 2 and node.input[2]
        product = f"{node.output[0]}_matmul" if has_bias else node.output[0]
        nodes.append(
            helper.make_node("MatMul", [node.input[0], kn], [product], name=f"{name}_matmul")
        )
        if has_bias:
            nodes.append(
                helper.make_node(
                    "Add", [product, node.input[2]], [node.output[0]], name=f"{name}_bias"
                )
            )
    model.graph.ClearField("node")
    model.graph.node.extend(nodes)
    return model


# The converters that the methods table names, each as (src, dst, calibration) -> None.
_CONVERTERS: dict[str, Callable[[Path, Path, np.ndarray | None], None]] = {
    "copy_fp32": lambda src, dst, _: shutil.copyfile(src, dst),
    "to_fp16": lambda src, dst, _: _to_fp16(src, dst),
    "to_int8_static": _to_int8_static,
    "to_int8_dynamic": lambda src, dst, _: _to_int8_dynamic(src, dst),
    "to_int4": lambda src, dst, _: _to_int4(src, dst),
    "to_int8_trt": _to_int8_trt,
    "to_fp8_trt": _to_fp8_trt,
}
