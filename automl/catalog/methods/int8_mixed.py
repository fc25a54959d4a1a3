"""``int8-mixed``: ``int8-static``, with chosen layers left in fp32."""

from __future__ import annotations

from typing import TYPE_CHECKING

from automl.catalog.methods._tools import to_qdq
from automl.catalog.methods.int8_static import Int8Static

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    import numpy as np


class Int8Mixed(Int8Static):
    """The ``int8-static`` recipe on every layer but those kept in fp32. A trial keeps the first
    ``keep_fp32`` layers of its model's evidence ordering (see
    :mod:`automl.pipeline.layer_evidence`): those whose quantization costs the most accuracy
    for the least measured time, and those that int8 does not make faster."""

    name = "int8-mixed"
    cache_tag = "qdq-u8s8-per-channel-reduce-range-keeping-with-neighbours"
    legacy = None
    per_layer = True

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
        to_qdq(
            src, dst, calibration, activations="QUInt8", reduce_range=True, exclude=keep,
            only=only,
        )  # fmt: skip
