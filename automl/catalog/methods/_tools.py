"""What the converters share: ORT's pre-processing, static QDQ, and tool failures as errors."""

from __future__ import annotations

import logging
import sys
import tempfile
from collections import defaultdict
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from automl.catalog._registry import LAYER_OPS, Method
from automl.errors import UnsupportedQuantization

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    import numpy as np
    import onnx

_CALIBRATION_BATCH = 128
# quantize_static's warnings about what a recipe intends (see _quiet_expected_warnings).
_EXPECTED_WARNINGS = ("is out-of-range for weight", "does not support quantization to float 8")


@contextmanager
def tool_failure(step: str) -> Iterator[None]:
    """Re-raise any failure of a third-party tool as UnsupportedQuantization."""
    try:
        yield
    # The ORT tools raise anything from AssertionError to RuntimeError on graphs they can't handle.
    except Exception as e:
        raise UnsupportedQuantization(f"{step} failed: {type(e).__name__}: {e}") from e


def pre_process(src: Path, dst: Path) -> Path:
    """Shape inference and graph cleanup that ORT recommends before int8 quantization."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with tool_failure("onnxruntime quant_pre_process"):
        quant_pre_process(src, dst)
    return dst


def to_qdq(
    src: Path,
    dst: Path,
    calibration: np.ndarray,
    *,
    activations: str,
    weights: str = "QInt8",
    calibrate: str = "MinMax",
    reduce_range: bool = False,
    extra: Mapping[str, bool] | None = None,
    exclude: Sequence[str] = (),
    only: Sequence[str] = (),
) -> None:
    """Static QDQ quantization with per-channel weights, calibrated on ``calibration``.

    ``activations`` and ``weights`` name a ``QuantType``, ``calibrate`` a ``CalibrationMethod``.
    The nodes named in ``exclude`` stay fp32, with the nodes that only serve them (see
    :func:`fp32_region`); with ``only``, no other node is quantized. Node names are those of
    ``src`` (ORT's pre-processing keeps them).
    """
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    with tempfile.TemporaryDirectory() as tmp:
        pre = pre_process(src, Path(tmp) / "pre.onnx")
        graph = onnx.load(pre).graph
        weights_names = {i.name for i in graph.initializer}
        name = next(i.name for i in graph.input if i.name not in weights_names)
        reader = _ArrayReader(name, calibration)
        with tool_failure("onnxruntime quantize_static"), _quiet_expected_warnings():
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
                extra_options=dict(extra or {}),
                nodes_to_exclude=fp32_region(graph, exclude),
                nodes_to_quantize=list(only),
            )


class QdqMethod(Method):
    """A static QDQ method whose recipe is its ``qdq``: the keywords of :func:`to_qdq`."""

    needs_calibration = True
    qdq: ClassVar[Mapping[str, Any]]

    def convert(self, src: Path, dst: Path, calibration: np.ndarray | None) -> None:
        assert calibration is not None  # needs_calibration: the quantize stage checks it
        to_qdq(src, dst, calibration, **self.qdq)


class KeepsLayers:
    """Makes a :class:`QdqMethod` per-layer: put it before the method's class. The method's
    ``qdq`` on every layer but those kept (see :meth:`automl.catalog.Method.convert_layers`)."""

    per_layer = True
    qdq: ClassVar[Mapping[str, Any]]

    def convert_layers(
        self,
        src: Path,
        dst: Path,
        calibration: np.ndarray | None,
        *,
        keep: Sequence[str] = (),
        only: Sequence[str] = (),
    ) -> None:
        assert calibration is not None  # needs_calibration: the quantize stage checks it
        to_qdq(src, dst, calibration, **self.qdq, exclude=keep, only=only)


def fp32_region(graph: onnx.GraphProto, keep: Sequence[str]) -> list[str]:
    """``keep`` (layers left in fp32) and the other nodes whose quantization would serve kept
    layers only.

    A node that is not a layer (of :data:`LAYER_OPS`) is added when every layer next to it is
    kept: those that its outputs reach and those that reach it, through other such nodes (a Pad
    between the input and a kept Conv, a Clip between two kept ones). ORT would otherwise
    quantize it, and a kept layer would read an int8-rounded input. A node next to a quantized
    layer stays quantized with it (a Clip after a quantized Conv): that layer's output is
    int8-rounded anyway, and ORT fuses the two.
    """
    if not keep:
        return []
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    producer = {out: node for node in graph.node for out in node.output}
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)

    def ahead(node: onnx.NodeProto) -> list[onnx.NodeProto]:
        return [c for out in node.output for c in consumers[out]]

    def behind(node: onnx.NodeProto) -> list[onnx.NodeProto]:
        return [producer[name] for name in node.input if name in producer]

    kept = set(keep)
    served = []
    for node in graph.node:
        if node.name and node.op_type not in LAYER_OPS:
            layers = _layers_reached(node, ahead) | _layers_reached(node, behind)
            if layers and layers <= kept:
                served.append(node.name)
    return [*keep, *served]


def _layers_reached(
    start: onnx.NodeProto, step: Callable[[onnx.NodeProto], list[onnx.NodeProto]]
) -> set[str]:
    """The layers that ``step`` reaches from ``start`` through nodes that are not layers."""
    layers: set[str] = set()
    seen: set[int] = set()
    todo = [start]
    while todo:
        for node in step(todo.pop()):
            if node.op_type in LAYER_OPS:
                layers.add(node.name)
            elif id(node) not in seen:
                seen.add(id(node))
                todo.append(node)
    return layers


class _ArrayReader:
    """CalibrationDataReader over an in-memory array, in fixed-size batches."""

    def __init__(self, input_name: str, data: np.ndarray) -> None:
        batches = (
            data[i : i + _CALIBRATION_BATCH] for i in range(0, len(data), _CALIBRATION_BATCH)
        )
        self._feeds = iter([{input_name: b} for b in batches])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


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
