"""The ``mlp`` family: flattened features through Linear+ReLU layers."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from automl.candidate import ArchConfig


class MLP(nn.Module):
    """Flatten, ``depth`` hidden Linear+ReLU layers of ``width`` units, then the classifier."""

    def __init__(self, arch: ArchConfig, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        features = math.prod(input_shape)
        layers: list[nn.Module] = [nn.Flatten()]
        for _ in range(arch.depth):
            layers += [nn.Linear(features, arch.width), nn.ReLU(), nn.Dropout(arch.dropout)]
            features = arch.width
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(features, num_classes)

    def forward(self, x):
        return self.classifier(self.features(x))
