"""Model families built from width and depth for any input shape and class count.

Every model names its output layer ``classifier`` so that pruning can leave it untouched.
"""

from __future__ import annotations

import torch
from torch import nn

from automl.candidate import ArchConfig
from automl.errors import SpecError


def build_model(
    arch: ArchConfig, input_shape: tuple[int, ...], num_classes: int, *, seed: int = 0
) -> nn.Module:
    """Build an untrained model of ``arch`` for inputs of ``input_shape`` (without batch).

    Args:
        arch: Family, width, depth and family-specific knobs.
        input_shape: Shape of one sample, e.g. (1, 8, 8); conv families need (C, H, W).
        num_classes: Number of output logits.
        seed: Seed of the weight initialisation.

    Returns:
        A torch module whose last layer is ``classifier``.

    Raises:
        SpecError: The family cannot take this input shape.
    """
    torch.manual_seed(seed)
    if arch.family == "mlp":
        return MLP(arch, input_shape, num_classes)
    if len(input_shape) != 3:
        raise SpecError(
            f"family {arch.family!r} needs image inputs (C, H, W); the data has {input_shape}. "
            "Use family 'mlp' for flat features."
        )
    body = {"cnn": _cnn_body, "resnet": _resnet_body, "mobilenet": _mobilenet_body}[arch.family]
    return ConvNet(body(arch, input_shape[0]), arch, num_classes)


class MLP(nn.Module):
    """Flatten, ``depth`` hidden Linear+ReLU layers of ``width`` units, then the classifier."""

    def __init__(self, arch: ArchConfig, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        features = 1
        for size in input_shape:
            features *= size
        layers: list[nn.Module] = [nn.Flatten()]
        for _ in range(arch.depth):
            layers += [nn.Linear(features, arch.width), nn.ReLU(), nn.Dropout(arch.dropout)]
            features = arch.width
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(features, num_classes)

    def forward(self, x):
        return self.classifier(self.features(x))


class ConvNet(nn.Module):
    """A conv body, global average pooling, dropout and the classifier."""

    def __init__(self, body: nn.Sequential, arch: ArchConfig, num_classes: int) -> None:
        super().__init__()
        self.features = body
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(arch.dropout))
        self.classifier = nn.Linear(arch.width, num_classes)

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)))


def _conv_bn(c_in: int, c_out: int, kernel: int, groups: int = 1) -> list[nn.Module]:
    conv = nn.Conv2d(c_in, c_out, kernel, padding=kernel // 2, groups=groups, bias=False)
    return [conv, nn.BatchNorm2d(c_out), nn.ReLU()]


def _cnn_body(arch: ArchConfig, channels: int) -> nn.Sequential:
    layers = _conv_bn(channels, arch.width, arch.kernel_size)
    for _ in range(arch.depth - 1):
        layers += _conv_bn(arch.width, arch.width, arch.kernel_size)
    return nn.Sequential(*layers)


class ResidualBlock(nn.Module):
    """Two conv+BN layers with an identity shortcut."""

    def __init__(self, width: int, kernel: int) -> None:
        super().__init__()
        pad = kernel // 2
        self.conv1 = nn.Conv2d(width, width, kernel, padding=pad, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, kernel, padding=pad, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + x)


def _resnet_body(arch: ArchConfig, channels: int) -> nn.Sequential:
    blocks = [ResidualBlock(arch.width, arch.kernel_size) for _ in range(arch.depth)]
    return nn.Sequential(*_conv_bn(channels, arch.width, arch.kernel_size), *blocks)


def _mobilenet_body(arch: ArchConfig, channels: int) -> nn.Sequential:
    layers = _conv_bn(channels, arch.width, 3)
    for _ in range(arch.depth):
        layers += _conv_bn(arch.width, arch.width, arch.kernel_size, groups=arch.width)
        layers += _conv_bn(arch.width, arch.width, 1)
    return nn.Sequential(*layers)
