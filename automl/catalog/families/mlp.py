"""``mlp``: flattened inputs through fully connected layers."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from automl.catalog._registry import Family

if TYPE_CHECKING:
    from torch import nn


class Mlp(Family):
    """Flatten, ``depth`` hidden Linear+ReLU layers of ``width`` units, then the classifier;
    takes any float features (a signal or an image is flattened)."""

    name = "mlp"
    takes = ("features", "signals", "images")
    example = MappingProxyType({"layout": "features", "width": 32, "depth": 2})

    def build(
        self, arch: Any, input_shape: tuple[int, ...], num_classes: int, vocab_size: int | None
    ) -> nn.Module:
        from automl.catalog.families._mlp_net import MLP

        return MLP(arch, input_shape, num_classes)
