"""What a trained model gives: its logits, and the layer that produces them.

Hugging Face and timm models return a ``ModelOutput``, a dict or a tuple; :class:`LogitsOf`
picks the logits out of it by key or index, so that export, pruning, fine-tuning and accuracy
all see one tensor. :func:`find_output_layer` finds the layer whose output is the model's
output, which pruning must keep whole: it runs the model once with a forward hook on every
submodule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from automl.errors import SpecError

if TYPE_CHECKING:
    from collections.abc import Mapping

# The attribute under which LogitsOf keeps the user's model: its layers are "model.<name>".
WRAPPED = "model"


class LogitsOf(nn.Module):
    """The user's model, returning only the logits: ``model(x)[key]`` (a key or an index)."""

    def __init__(self, model: nn.Module, key: str | int) -> None:
        super().__init__()
        self.model = model
        self.key = key

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return pick_logits(self.model(x), self.key)


def pick_logits(output: Any, key: str | int | None) -> torch.Tensor:
    """The logits in a model's ``output``: the output itself, or its item ``key``.

    Raises:
        SpecError: The output is no tensor and ``key`` is None, or ``key`` is not in it.
    """
    if key is None:
        if isinstance(output, torch.Tensor):
            return output
        raise SpecError(
            f"the model returns a {type(output).__name__}, not a tensor of logits "
            f"({_describe(output)}); name its logits with model.output (--model-output), "
            "a key such as 'logits' or an index such as 0"
        )
    try:
        value = output[key]
    except (KeyError, IndexError, TypeError):
        raise SpecError(
            f"model.output {key!r} is not in the model's output, a {type(output).__name__} "
            f"({_describe(output)})"
        ) from None
    if not isinstance(value, torch.Tensor):
        raise SpecError(f"model.output {key!r} is a {type(value).__name__}, not a tensor of logits")
    return value


def _describe(output: Any) -> str:
    if isinstance(output, dict):  # ModelOutput is an OrderedDict
        return f"keys {list(output.keys())}"
    if isinstance(output, tuple | list):
        return f"{len(output)} items"
    return "no keys"


def find_output_layer(model: nn.Module, example: torch.Tensor) -> str:
    """The name of the layer that produces ``model``'s output, which pruning keeps whole.

    The layer is the innermost submodule with weights of its own whose output is the very
    tensor the model returns (never a container, whose whole body pruning would then skip);
    where none has weights (a final activation), the last layer with weights that gives as
    many values per sample as the model does. Runs the model once on ``example``.

    Raises:
        SpecError: No layer, or more than one unrelated layer, may be the output layer.
    """
    seen: list[tuple[str, nn.Module, Any]] = []
    hooks = [
        module.register_forward_hook(
            lambda m, _, out, name=name: seen.append((name, m, out))  # keeps outputs alive
        )
        for name, module in model.named_modules()
        if name
    ]
    try:
        with torch.no_grad():
            output = model(example)
    finally:
        for hook in hooks:
            hook.remove()
    producers = [name for name, m, out in seen if out is output and _has_weights(m)]
    if producers:
        return max(producers, key=lambda name: name.count("."))
    width = output.shape[-1] if isinstance(output, torch.Tensor) else None
    same_width = {
        name: m for name, m, out in seen
        if _has_weights(m) and isinstance(out, torch.Tensor) and out.shape[-1] == width
    }  # fmt: skip
    return _the_one(same_width, model)


def _the_one(candidates: Mapping[str, nn.Module], model: nn.Module) -> str:
    if len(candidates) == 1:
        return next(iter(candidates))
    layers = [n for n, _ in model.named_children()]
    if not candidates:
        raise SpecError(
            f"no layer of the model produces its output (its top-level layers: {layers}): "
            "the logits come from a function in forward. Name the layer that gives them with "
            "model.output_layer (--output-layer), which pruning keeps whole"
        )
    raise SpecError(
        f"more than one layer may give the model's logits: {sorted(candidates)}; name the one "
        "that does with model.output_layer (--output-layer), which pruning keeps whole"
    )


def _has_weights(module: nn.Module) -> bool:
    """Whether the module has parameters of its own, not only through its children."""
    return any(True for _ in module.parameters(recurse=False))
