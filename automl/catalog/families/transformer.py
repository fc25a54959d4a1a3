"""``transformer``: an encoder over int64 token ids, for text-like classification."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from automl.catalog._registry import Family
from automl.errors import SpecError

if TYPE_CHECKING:
    from torch import nn


class Transformer(Family):
    """Token and position embeddings, ``depth`` pre-norm encoder layers of ``width`` (d_model)
    with ``heads`` attention heads and an MLP of ``mlp_ratio`` × ``width``, mean pooling and the
    classifier. Pruning removes whole heads."""

    name = "transformer"
    takes = ("tokens",)
    example = MappingProxyType({"layout": "tokens", "width": 32, "depth": 1, "heads": 4})

    def build(
        self, arch: Any, input_shape: tuple[int, ...], num_classes: int, vocab_size: int | None
    ) -> nn.Module:
        from automl.catalog.families._transformer_net import Transformer as Network

        if vocab_size is None or len(input_shape) != 1:
            raise SpecError(
                f"family 'transformer' needs token ids (L,) with a vocabulary; the data has "
                f"{input_shape} and vocab_size {vocab_size}"
            )
        return Network(arch, input_shape[0], vocab_size, num_classes)

    def attention_heads(self, model: nn.Module) -> dict[nn.Module, int]:
        from automl.catalog.families._transformer_net import attention_heads

        return attention_heads(model)

    def space_problem(self, values_of: Callable[[str], list]) -> str | None:
        """Every width (d_model) the space suggests must split into every heads value."""
        widths, heads = values_of("arch.width"), values_of("arch.heads")
        bad = next(((w, h) for w in widths for h in heads if int(w) % int(h)), None)
        if bad is None:
            return None
        return (
            f"family 'transformer' needs widths (d_model) that every heads value divides, and "
            f"width {bad[0]} does not split into {bad[1]} heads: choose widths that are "
            f"multiples of {sorted({int(h) for h in heads})}"
        )
