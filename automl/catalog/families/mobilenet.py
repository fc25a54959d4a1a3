"""``mobilenet``: a conv family for signals (C, L) and images (C, H, W)."""

from __future__ import annotations

from types import MappingProxyType

from automl.catalog.families._conv import ConvFamily


class Mobilenet(ConvFamily):
    """Depthwise-separable blocks (a depthwise then a pointwise convolution), in stages."""

    name = "mobilenet"
    example = MappingProxyType(
        {"layout": "signals", "width": 16, "depth": 1, "stages": 2, "width_growth": 2.0}
    )
