"""``resnet``: a conv family for signals (C, L) and images (C, H, W)."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from automl.catalog._registry import Family

if TYPE_CHECKING:
    from torch import nn


class Resnet(Family):
    """Residual blocks of two convolutions with a skip connection, in stages."""

    name = "resnet"
    takes = ("signals", "images")
    example = MappingProxyType(
        {"layout": "images", "width": 8, "depth": 1, "stages": 3, "width_growth": 2.0}
    )

    def build(
        self, arch: Any, input_shape: tuple[int, ...], num_classes: int, vocab_size: int | None
    ) -> nn.Module:
        from automl.catalog.families._conv_nets import conv_net

        return conv_net(arch, input_shape, num_classes)
