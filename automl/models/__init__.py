"""Model families built from an :class:`~automl.candidate.ArchConfig` for the data's inputs.

``mlp`` takes any float features; ``cnn``, ``resnet`` and ``mobilenet`` take (C, L) or
(C, H, W) floats; ``transformer`` takes int64 token ids (L,) with a vocabulary; a
``package.module:function`` is the user's own (see :mod:`automl.models._user`). Every built-in
model names its output layer ``classifier`` so that pruning can leave it untouched.
"""

from __future__ import annotations

import torch
from torch import nn

from automl.candidate import CONV_FAMILIES, ArchConfig
from automl.errors import SpecError
from automl.models._conv import conv_net
from automl.models._mlp import MLP
from automl.models._outputs import WRAPPED, LogitsOf, find_output_layer, pick_logits
from automl.models._transformer import Transformer, attention_heads
from automl.models._user import import_family, output_layer, user_model


def build_model(
    arch: ArchConfig,
    input_shape: tuple[int, ...],
    num_classes: int,
    *,
    seed: int = 0,
    vocab_size: int | None = None,
) -> nn.Module:
    """Build an untrained model of ``arch`` for inputs of ``input_shape`` (without batch).

    Args:
        arch: Family, width, depth and family-specific knobs.
        input_shape: Shape of one sample, e.g. (1, 8, 8); conv families need (C, L) or
            (C, H, W), the transformer (L,) token ids.
        num_classes: Number of output logits.
        seed: Seed of the weight initialisation.
        vocab_size: Size of the token vocabulary, for token inputs.

    Returns:
        A torch module whose output layer is ``arch.output_layer`` (``classifier``).

    Raises:
        SpecError: The family cannot take this input, or a user-written family is broken.
    """
    torch.manual_seed(seed)
    if arch.is_user_family:
        return user_model(arch, input_shape, num_classes, vocab_size)
    if arch.family == "transformer":
        if vocab_size is None or len(input_shape) != 1:
            raise SpecError(
                f"family 'transformer' needs token ids (L,) with a vocabulary; the data has "
                f"{input_shape} and vocab_size {vocab_size}"
            )
        return Transformer(arch, input_shape[0], vocab_size, num_classes)
    if arch.family == "mlp":
        return MLP(arch, input_shape, num_classes)
    if arch.family in CONV_FAMILIES and len(input_shape) in (2, 3):
        return conv_net(arch, input_shape, num_classes)
    raise SpecError(
        f"family {arch.family!r} needs (C, L) or (C, H, W) inputs; the data has {input_shape}. "
        "Use family 'mlp' for flat features."
    )


__all__ = [
    "WRAPPED",
    "LogitsOf",
    "attention_heads",
    "build_model",
    "find_output_layer",
    "import_family",
    "output_layer",
    "pick_logits",
]
