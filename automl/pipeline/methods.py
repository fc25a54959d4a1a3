"""Quantization methods as a table: one named row per way to make a quantized graph.

| name             | bits | calibrated | what changes                                         |
|------------------|------|------------|------------------------------------------------------|
| ``fp32``         | 32   | no         | nothing: the file is copied                          |
| ``fp16``         | 16   | no         | weights and compute in float16; I/O stays float32    |
| ``int8-static``  | 8    | yes        | QDQ, per-channel int8 weights, uint8 activations     |
| ``int8-dynamic`` | 8    | no         | int8 weights, activations quantized at run time      |
| ``int4-weight``  | 4    | no         | weight-only ``MatMulNBits`` on MatMul/Gemm; Conv fp32 |
| ``int8-trt``     | 8    | yes        | QDQ, signed symmetric int8 (zero points 0), float bias |
| ``fp8-trt``      | 8    | yes        | QDQ, float8 E4M3 (zero points 0), float bias          |

``int8-static`` and ``int8-dynamic`` are CPU recipes (U8S8 is the CPU EP's fast path; the CUDA
EP has no ``ConvInteger``). ``int8-trt`` and ``fp8-trt`` are recipes of TensorRT's explicit
quantization; TensorRT runs FP8 on compute capability 8.9 and later (Ada, Hopper: H100, H200).

Targets list the methods they run by name (``methods:`` in their YAML), and the stage cache
keys a quantized graph by its method's ``cache_tag``, which changes whenever the recipe does.
This module is data only: it imports neither onnx nor onnxruntime, so the target registry can
check method names at load. A row's ``converter`` names the function in
:mod:`automl.pipeline.quantize` that writes the graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from automl.errors import SpecError, UnsupportedQuantization

if TYPE_CHECKING:
    from collections.abc import Sequence

INT8_MODES = ("static", "dynamic")


@dataclass(frozen=True)
class Method:
    """One way to quantize a model.

    Attributes:
        name: Stable name, used in target YAMLs, trial records and cache keys.
        bits: Bit-width of the weights (32, 16, 8 or 4).
        needs_calibration: Whether the converter needs calibration samples.
        converter: Name of the function in :mod:`automl.pipeline.quantize` that writes it.
        cache_tag: Identity of the recipe; a graph made with another tag is not reused.
    """

    name: str
    bits: int
    needs_calibration: bool
    converter: str
    cache_tag: str


# Static int8 weights use 7 bits (``reduce_range``): U8S8 products saturate on CPUs without VNNI
# (AVX2, AVX-512), which cost a small CNN 8 points of accuracy on an AVX2 host.
_ROWS = (
    Method("fp32", 32, False, "copy_fp32", "fp32-copy"),
    Method("fp16", 16, False, "to_fp16", "fp16-keep-io"),
    Method("int8-static", 8, True, "to_int8_static", "qdq-u8s8-per-channel-reduce-range"),
    Method("int8-dynamic", 8, False, "to_int8_dynamic", "dynamic-s8"),
    Method("int4-weight", 4, False, "to_int4", "matmulnbits-s4-block32or16"),
    Method("int8-trt", 8, True, "to_int8_trt", "qdq-s8s8-symmetric-per-channel-float-bias"),
    Method("fp8-trt", 8, True, "to_fp8_trt", "qdq-e4m3-per-channel-distribution-float-bias"),
)
METHODS = MappingProxyType({m.name: m for m in _ROWS})
BITS = tuple(sorted({m.bits for m in _ROWS}, reverse=True))

# The methods of the old ``(bits, int8_mode)`` form; ``int8_mode`` counts only for 8 bits.
_BY_BITS = {
    (32, None): "fp32",
    (16, None): "fp16",
    (8, "static"): "int8-static",
    (8, "dynamic"): "int8-dynamic",
    (4, None): "int4-weight",
}


def get_method(name: str) -> Method:
    """The method called ``name``.

    Raises:
        SpecError: No method has that name; the message lists the known ones.
    """
    if name not in METHODS:
        raise SpecError(f"unknown quantization method {name!r}; known: {', '.join(METHODS)}")
    return METHODS[name]


def method_for(bits: int, int8_mode: str = "static") -> Method:
    """The method of the old form: a bit-width, and for 8 bits an ``int8_mode``.

    Args:
        bits: 32, 16, 8 or 4.
        int8_mode: ``"static"`` or ``"dynamic"``; used only when ``bits`` is 8.

    Returns:
        ``fp32``, ``fp16``, ``int8-static``, ``int8-dynamic`` or ``int4-weight``.

    Raises:
        UnsupportedQuantization: ``bits`` is not one of :data:`BITS`.
        SpecError: ``bits`` is 8 and ``int8_mode`` is unknown.
    """
    if bits not in BITS:
        raise UnsupportedQuantization(f"bits={bits} is not supported; choose one of {BITS}")
    if bits == 8 and int8_mode not in INT8_MODES:
        raise SpecError(f"int8_mode={int8_mode!r} is unknown; choose one of {INT8_MODES}")
    return METHODS[_BY_BITS[bits, int8_mode if bits == 8 else None]]


def methods_for_bits(bits: Sequence[int]) -> tuple[str, ...]:
    """The old form's methods of these bit-widths, in table order (for ``precisions:``)."""
    return tuple(name for (b, _), name in _BY_BITS.items() if b in bits)
