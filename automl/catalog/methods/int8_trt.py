"""``int8-trt``: TensorRT's explicit int8 quantization."""

from __future__ import annotations

from types import MappingProxyType

from automl.catalog.methods._tools import QdqMethod
from automl.catalog.runtimes._base import TRT

# Zero points 0 on both sides, and biases left float (TensorRT's Q/DQ recipe).
SYMMETRIC_FLOAT_BIAS = MappingProxyType(
    {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False}
)


class Int8Trt(QdqMethod):
    """QDQ with signed, symmetric int8 (zero points 0) and per-channel weights; biases stay
    float, as TensorRT has no int32 dequantization to fold them from. Layers outside Q/DQ pairs
    may run in fp16 (TensorRT's "best" mode), never fp32 as TF32 alone."""

    name = "int8-trt"
    bits = 8
    cache_tag = "qdq-s8s8-symmetric-per-channel-float-bias"
    engine_precision = "int8"
    graph = "qdq-int8-symmetric"
    provider_options = MappingProxyType(
        {TRT: {"trt_int8_enable": "True", "trt_fp16_enable": "True"}}
    )

    qdq = MappingProxyType({"activations": "QInt8", "extra": SYMMETRIC_FLOAT_BIAS})
