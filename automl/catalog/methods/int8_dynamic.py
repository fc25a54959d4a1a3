"""``int8-dynamic``: int8 weights, activations quantized at run time."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from automl.catalog._registry import Method
from automl.catalog.methods._tools import pre_process, tool_failure

if TYPE_CHECKING:
    import numpy as np


class Int8Dynamic(Method):
    """Signed int8 weights; activations are quantized at run time, so no calibration. A CPU
    recipe: the CUDA EP has no ``ConvInteger``."""

    name = "int8-dynamic"
    bits = 8
    cache_tag = "dynamic-s8"
    graph = "dynamic-int8"
    legacy = (8, "dynamic")
    accuracy_drop = 0.03

    def convert(self, src: Path, dst: Path, calibration: np.ndarray | None) -> None:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        with tempfile.TemporaryDirectory() as tmp:
            pre = pre_process(src, Path(tmp) / "pre.onnx")
            with tool_failure("onnxruntime quantize_dynamic"):
                quantize_dynamic(pre, dst, weight_type=QuantType.QInt8)
