"""``fp8-trt``: TensorRT's explicit float8 quantization (Ada, Hopper)."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from automl.catalog._registry import Method
from automl.catalog.methods._tools import to_qdq
from automl.catalog.methods.int8_trt import SYMMETRIC_FLOAT_BIAS
from automl.catalog.runtimes._base import TRT

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np


class Fp8Trt(Method):
    """QDQ with float8 E4M3 weights and activations, zero points 0, float bias; TensorRT runs
    FP8 on compute capability 8.9 and later (H100, H200)."""

    name = "fp8-trt"
    bits = 8
    needs_calibration = True
    cache_tag = "qdq-e4m3-per-channel-distribution-float-bias"
    engine_precision = "fp8"
    graph = "qdq-fp8"
    provider_options = MappingProxyType({TRT: {"trt_fp16_enable": "True"}})
    # The CPU EP's ReluQuantRewrite drops a Relu before a QuantizeLinear whose zero point is the
    # type's lowest value; in E4M3 zero is not, and a digits CNN falls to 10% accuracy. ONNX
    # Runtime 1.31's QDQ fusions make QLinearConv of E4M3 inputs, which no kernel takes, and the
    # session is refused. TensorRT compiles the graph before either runs.
    unsafe_rewrites = ("ReluQuantRewrite", "QDQSelectorActionTransformer")

    def convert(self, src: Path, dst: Path, calibration: np.ndarray | None) -> None:
        # ORT calibrates float8 only by Distribution (scale = std / std of E4M3). Without
        # ActivationSymmetric, ORT drops each Relu before a Q as if 0 were the type's minimum.
        assert calibration is not None
        to_qdq(
            src,
            dst,
            calibration,
            activations="QFLOAT8E4M3FN",
            weights="QFLOAT8E4M3FN",
            calibrate="Distribution",
            extra=SYMMETRIC_FLOAT_BIAS,
        )
