"""Model families as a user writes them, imported by the tests as ``user_families:<name>``."""

from __future__ import annotations

import torch
from torch import nn


class _Net(nn.Module):
    """Dilated 1-D convs, global max pooling and an output layer named ``head``."""

    def __init__(self, width: int, depth: int, channels: int, classes: int, dilation: int):
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(depth):
            conv = nn.Conv1d(channels if i == 0 else width, width, 3, padding=dilation,
                             dilation=dilation)  # fmt: skip
            layers += [conv, nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.body(x).amax(dim=-1))


def dilated_conv(width, depth, input_shape, num_classes, dilation=1):
    """The family of the end-to-end test: ``arch.extra.dilation`` is its own knob."""
    return _Net(width, depth, input_shape[0], num_classes, dilation)


def unnamed_output(width, depth, input_shape, num_classes):
    """A model whose output layer is ``head``, used without ``output_layer: head``."""
    return _Net(width, depth, input_shape[0], num_classes, 1)


def refuses_to_build(width, depth, input_shape, num_classes):
    raise ValueError(f"this family needs 2-D images, not {input_shape}")


class _Bessel(_Net):
    def forward(self, x):
        return super().forward(torch.special.bessel_j0(x))


def cannot_export(width, depth, input_shape, num_classes):
    """Trains and prunes, but ONNX has no Bessel function."""
    return _Bessel(width, depth, input_shape[0], num_classes, 1)


def not_a_module(width, depth, input_shape, num_classes):
    return {"width": width}


class _Rigid(_Net):
    def forward(self, x):  # a reshape that hard-codes the width: pruning breaks it
        return self.head(self.body(x).reshape(len(x), self.width, -1).amax(dim=-1))


def cannot_prune(width, depth, input_shape, num_classes):
    model = _Rigid(width, depth, input_shape[0], num_classes, 1)
    model.width = width
    return model
