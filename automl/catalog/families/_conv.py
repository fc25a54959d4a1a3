"""What the conv families share: the layouts they take and their builder (torch-free here)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from automl.catalog._registry import Family

if TYPE_CHECKING:
    from torch import nn


class ConvFamily(Family):
    """A family of conv blocks in stages (see :mod:`automl.catalog.families._conv_nets`); a
    subclass names it and its example."""

    takes = ("signals", "images")

    def build(
        self, arch: Any, input_shape: tuple[int, ...], num_classes: int, vocab_size: int | None
    ) -> nn.Module:
        from automl.catalog.families._conv_nets import conv_net

        return conv_net(arch, input_shape, num_classes)
