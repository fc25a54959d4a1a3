"""``int8-mixed``: ``int8-static``, with chosen layers left in fp32."""

from __future__ import annotations

from automl.catalog.methods._tools import KeepsLayers
from automl.catalog.methods.int8_static import Int8Static


class Int8Mixed(KeepsLayers, Int8Static):
    """The ``int8-static`` recipe on every layer but those kept in fp32. A trial keeps the first
    ``keep_fp32`` layers of its model's evidence ordering (see
    :mod:`automl.pipeline.layer_evidence`): those whose quantization costs the most accuracy
    for the least measured time, and those that int8 does not make faster."""

    name = "int8-mixed"
    cache_tag = "qdq-u8s8-per-channel-reduce-range-keeping-with-neighbours"
    legacy = None
