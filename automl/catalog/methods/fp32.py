"""``fp32``: the exported graph as it is."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from automl.catalog._registry import Method

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np


class Fp32(Method):
    """Nothing changes: the fp32 file is copied. Not a TensorRT method, which would build its
    layers as TF32."""

    name = "fp32"
    bits = 32
    cache_tag = "fp32-copy"
    graph = "fp32"
    legacy = (32, None)
    accuracy_drop = 0.0

    def convert(self, src: Path, dst: Path, calibration: np.ndarray | None) -> None:
        shutil.copyfile(src, dst)
