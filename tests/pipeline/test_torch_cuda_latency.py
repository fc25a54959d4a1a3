"""The torch-on-CUDA fallback of the latency stage: what it refuses before any training."""

from __future__ import annotations

import onnxruntime as ort
import pytest

from automl.errors import UnsupportedQuantization
from automl.pipeline.torch_cuda_latency import check_measurable
from automl.targets import load_target


@pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(),
    reason="onnxruntime-gpu is installed: the torch fallback is not used",
)
def test_a_bit_width_the_torch_cuda_fallback_cannot_time_is_refused_up_front():
    a100 = load_target("a100")  # this ONNX Runtime has no CUDA provider: torch would time it
    check_measurable(a100, 16)
    check_measurable(a100, 32)
    with pytest.raises(UnsupportedQuantization, match="onnxruntime-gpu"):
        check_measurable(a100, 8)  # would otherwise be timed as the fp32 model
    check_measurable(load_target("cpu"), 8)
