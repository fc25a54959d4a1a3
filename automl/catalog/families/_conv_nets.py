"""The conv families ``cnn``, ``resnet`` and ``mobilenet``, for 1-D (C, L) and 2-D (C, H, W) inputs.

Each is built in stages: ``depth`` blocks per stage, and every stage after the first opens with
a block of stride 2 that halves the length (or height and width) and widens to that stage's
width. One stage is the body of old: every layer at full resolution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from automl.candidate import ArchConfig


@dataclass(frozen=True)
class _Ops:
    """The layer types of one dimensionality."""

    conv: type[nn.Module]
    norm: type[nn.Module]
    pool: type[nn.Module]


_OPS = {
    1: _Ops(nn.Conv1d, nn.BatchNorm1d, nn.AdaptiveAvgPool1d),
    2: _Ops(nn.Conv2d, nn.BatchNorm2d, nn.AdaptiveAvgPool2d),
}


def conv_net(arch: ArchConfig, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """A conv family's model for samples of ``input_shape``: (C, L) or (C, H, W)."""
    ops = _OPS[len(input_shape) - 1]
    body = _BODIES[arch.family](arch, input_shape[0], ops)
    return ConvNet(body, ops, arch.stage_widths()[-1], arch.dropout, num_classes)


class ConvNet(nn.Module):
    """A conv body, global average pooling, dropout and the classifier."""

    def __init__(
        self, body: nn.Sequential, ops: _Ops, features: int, dropout: float, num_classes: int
    ) -> None:
        super().__init__()
        self.features = body
        self.pool = nn.Sequential(ops.pool(1), nn.Flatten(), nn.Dropout(dropout))
        self.classifier = nn.Linear(features, num_classes)

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)))


def _conv_bn(
    ops: _Ops, c_in: int, c_out: int, kernel: int, *, stride: int = 1, groups: int = 1
) -> list[nn.Module]:
    conv = ops.conv(
        c_in, c_out, kernel, stride=stride, padding=kernel // 2, groups=groups, bias=False
    )
    return [conv, ops.norm(c_out), nn.ReLU()]


def _transitions(arch: ArchConfig) -> list[tuple[int, int]]:
    """(width in, width out) of each stage's first block; the first stage keeps its width."""
    widths = arch.stage_widths()
    return [(widths[max(s - 1, 0)], widths[s]) for s in range(arch.stages)]


def _cnn_body(arch: ArchConfig, channels: int, ops: _Ops) -> nn.Sequential:
    k = arch.kernel_size
    layers = _conv_bn(ops, channels, arch.width, k)
    for stage, (c_in, c_out) in enumerate(_transitions(arch)):
        if stage:
            layers += _conv_bn(ops, c_in, c_out, k, stride=2)
        for _ in range(arch.depth - 1):
            layers += _conv_bn(ops, c_out, c_out, k)
    return nn.Sequential(*layers)


class ResidualBlock(nn.Module):
    """Two conv+BN layers with a shortcut: the identity, or a strided 1×1 projection."""

    def __init__(self, ops: _Ops, c_in: int, c_out: int, kernel: int, stride: int = 1) -> None:
        super().__init__()
        pad = kernel // 2
        self.conv1 = ops.conv(c_in, c_out, kernel, stride=stride, padding=pad, bias=False)
        self.bn1 = ops.norm(c_out)
        self.conv2 = ops.conv(c_out, c_out, kernel, padding=pad, bias=False)
        self.bn2 = ops.norm(c_out)
        self.relu = nn.ReLU()
        if stride != 1 or c_in != c_out:
            projection = ops.conv(c_in, c_out, 1, stride=stride, bias=False)
            self.shortcut = nn.Sequential(projection, ops.norm(c_out))
        else:
            self.shortcut = nn.Identity()

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


def _resnet_body(arch: ArchConfig, channels: int, ops: _Ops) -> nn.Sequential:
    k = arch.kernel_size
    blocks: list[nn.Module] = []
    for stage, (c_in, c_out) in enumerate(_transitions(arch)):
        blocks.append(ResidualBlock(ops, c_in, c_out, k, stride=2 if stage else 1))
        blocks += [ResidualBlock(ops, c_out, c_out, k) for _ in range(arch.depth - 1)]
    return nn.Sequential(*_conv_bn(ops, channels, arch.width, k), *blocks)


def _mobilenet_body(arch: ArchConfig, channels: int, ops: _Ops) -> nn.Sequential:
    layers = _conv_bn(ops, channels, arch.width, 3)
    for stage, (c_in, c_out) in enumerate(_transitions(arch)):
        for block in range(arch.depth):
            stride, width = (2, c_in) if stage and not block else (1, c_out)
            layers += _conv_bn(ops, width, width, arch.kernel_size, stride=stride, groups=width)
            layers += _conv_bn(ops, width, c_out, 1)
    return nn.Sequential(*layers)


_BODIES = {"cnn": _cnn_body, "resnet": _resnet_body, "mobilenet": _mobilenet_body}
