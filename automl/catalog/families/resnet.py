"""``resnet``: a conv family for signals (C, L) and images (C, H, W)."""

from __future__ import annotations

from types import MappingProxyType

from automl.catalog.families._conv import ConvFamily


class Resnet(ConvFamily):
    """Residual blocks of two convolutions with a skip connection, in stages."""

    name = "resnet"
    example = MappingProxyType(
        {"layout": "images", "width": 8, "depth": 1, "stages": 3, "width_growth": 2.0}
    )
