"""Models built from an :class:`~automl.candidate.ArchConfig` for the data's inputs.

A family of the catalog (:data:`automl.catalog.FAMILIES`) builds its own; a
``package.module:function`` is the user's own (see :mod:`automl.models._user`). Every model of
the catalog names its output layer ``classifier`` so that pruning can leave it untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from automl.catalog import FAMILIES, get_family, input_layout
from automl.errors import SpecError
from automl.models._outputs import WRAPPED, LogitsOf, find_output_layer, pick_logits
from automl.models._user import import_family, output_layer, user_model

if TYPE_CHECKING:
    from automl.candidate import ArchConfig


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
    family = get_family(arch.family)
    layout = input_layout(input_shape, vocab_size is not None)
    if layout not in family.takes:
        raise SpecError(
            f"family {arch.family!r} needs {family.needs}; the data holds {layout} of shape "
            f"{input_shape}"
            + (" (use family 'mlp' for flat features)" if layout == "features" else "")
        )
    return family.build(arch, input_shape, num_classes, vocab_size)


def attention_heads(model: nn.Module) -> dict[nn.Module, int]:
    """The attention projections of ``model`` whose heads pruning keeps whole, with their
    head counts, as every family of the catalog finds them."""
    return {k: v for family in FAMILIES.values() for k, v in family.attention_heads(model).items()}


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
