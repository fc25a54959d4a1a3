"""Model factories of the trained-model tests, importable as ``trained_factories:<name>``."""

from __future__ import annotations

import torch
from torch import nn


class DigitsCNN(nn.Module):
    """A small CNN for the 1x8x8 digits, wide enough that pruning changes its latency."""

    def __init__(self, width: int = 48) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
        )  # fmt: skip
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.classifier = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.pool(self.features(x)))


class NotExportable(DigitsCNN):
    """Its forward branches on data and calls numpy: the ONNX exporter cannot trace it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import numpy as np

        scale = float(np.asarray(x.detach()).std())
        return super().forward(x) * torch.tensor(scale)


class SoftmaxCNN(DigitsCNN):
    """The same model, giving probabilities instead of logits."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(super().forward(x), dim=1)


def softmax_cnn() -> nn.Module:
    """A model whose output is a softmax, which automl refuses: it takes logits."""
    return SoftmaxCNN()


def digits_cnn() -> nn.Module:
    """The model the tests train and save."""
    return DigitsCNN()


def narrower_cnn() -> nn.Module:
    """The same architecture at another width: the saved weights do not fit it."""
    return DigitsCNN(width=16)


def not_exportable() -> nn.Module:
    """A model ONNX export refuses."""
    return NotExportable()


def not_a_module() -> str:
    """A factory that returns something else."""
    return "a string"


class HeadNamed(DigitsCNN):
    """The same model with its output layer named ``head``."""

    def __init__(self) -> None:
        super().__init__()
        self.head = self.classifier
        del self.classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.features(x)))


def head_named() -> nn.Module:
    """A model whose output layer is ``head``, not ``classifier``."""
    return HeadNamed()


def sequential() -> nn.Module:
    """An unnamed ``nn.Sequential``: its output layer is '6', found by running it."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )  # fmt: skip


def deep_narrow() -> nn.Module:
    """A ResNet-like stand-in, deep and narrow, for raw uint8 pixels: 12 conv blocks with
    batch norm, and no layer named ``classifier``."""
    blocks = [nn.Conv2d(1, 12, 3, padding=1), nn.BatchNorm2d(12), nn.ReLU()]
    for _ in range(11):
        blocks += [nn.Conv2d(12, 12, 3, padding=1), nn.BatchNorm2d(12), nn.ReLU()]
    return nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(12, 10))
