"""``fp16``: weights and compute in float16."""

from __future__ import annotations

import warnings
from types import MappingProxyType
from typing import TYPE_CHECKING

from automl.catalog._registry import Method
from automl.catalog.methods._tools import tool_failure
from automl.catalog.runtimes._base import TRT

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np


class Fp16(Method):
    """Weights and compute in float16; the inputs and outputs stay float32."""

    name = "fp16"
    bits = 16
    cache_tag = "fp16-keep-io"
    engine_precision = "fp16"
    graph = "fp16"
    provider_options = MappingProxyType({TRT: {"trt_fp16_enable": "True"}})
    legacy = (16, None)
    accuracy_drop = 0.01

    def convert(self, src: Path, dst: Path, calibration: np.ndarray | None) -> None:
        import onnx
        from onnxconverter_common import float16

        with tool_failure("fp16 conversion"), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # tiny weights truncated to fp16's range
            model = float16.convert_float_to_float16(onnx.load(src), keep_io_types=True)
            onnx.save(model, dst)
