"""``int8-static``: calibrated QDQ int8, the CPU EP's fast path."""

from __future__ import annotations

from types import MappingProxyType

from automl.catalog.methods._tools import QdqMethod


class Int8Static(QdqMethod):
    """QDQ with per-channel int8 weights and uint8 activations (U8S8), calibrated by MinMax.
    Weights use 7 bits (``reduce_range``): U8S8 products saturate on CPUs without VNNI (AVX2,
    AVX-512), which cost a small CNN 8 points of accuracy on an AVX2 host."""

    name = "int8-static"
    bits = 8
    cache_tag = "qdq-u8s8-per-channel-reduce-range"
    graph = "qdq-int8"
    legacy = (8, "static")
    accuracy_drop = 0.03
    qdq = MappingProxyType({"activations": "QUInt8", "reduce_range": True})
