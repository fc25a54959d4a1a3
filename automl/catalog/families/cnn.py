"""``cnn``: a conv family for signals (C, L) and images (C, H, W)."""

from __future__ import annotations

from types import MappingProxyType

from automl.catalog.families._conv import ConvFamily


class Cnn(ConvFamily):
    """Plain conv blocks (conv, batch norm, ReLU) in stages, each stage after the first opening at stride 2."""

    name = "cnn"
    example = MappingProxyType(
        {"layout": "signals", "width": 16, "depth": 1, "stages": 2, "width_growth": 2.0}
    )
