"""``int8-trt-mixed``: ``int8-trt``, with chosen layers left out of int8."""

from __future__ import annotations

from automl.catalog.methods._tools import KeepsLayers
from automl.catalog.methods.int8_trt import Int8Trt


class Int8TrtMixed(KeepsLayers, Int8Trt):
    """The ``int8-trt`` recipe on every layer but those kept: a kept layer has no Q/DQ pair, so
    TensorRT runs it in fp16 (or fp32, where that kernel is faster). A trial keeps the first
    ``keep_fp32`` layers of its model's evidence ordering (see
    :mod:`automl.pipeline.layer_evidence`), timed per layer by TensorRT's own profiler."""

    name = "int8-trt-mixed"
    cache_tag = "qdq-s8s8-symmetric-per-channel-float-bias-keeping-with-neighbours"
