"""User-written families: ``arch.family: package.module:function``.

The function is called with keyword arguments ``width``, ``depth``, ``input_shape`` (one
sample's shape, without the batch), ``num_classes``, ``vocab_size`` when the data holds token
ids, and each knob the space declares as ``arch.extra.<name>``. It returns an ``nn.Module``
whose output layer is the submodule named ``classifier``, or the name in the space's
``output_layer``; pruning leaves that layer alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from automl.errors import SpecError
from automl.plugins import import_plugin

if TYPE_CHECKING:
    from collections.abc import Callable

    from automl.candidate import ArchConfig


def user_model(
    arch: ArchConfig, input_shape: tuple[int, ...], num_classes: int, vocab_size: int | None
) -> nn.Module:
    """Call the user's family function and check what it returns.

    Raises:
        SpecError: The function cannot be imported, or returns no ``nn.Module`` with the
            output layer; an exception the function raises propagates as it is.
    """
    function = import_family(arch.family)
    kwargs = {"width": arch.width, "depth": arch.depth, "input_shape": tuple(input_shape),
              "num_classes": num_classes, **arch.extra}  # fmt: skip
    if vocab_size is not None:
        kwargs["vocab_size"] = vocab_size
    model = function(**kwargs)
    if not isinstance(model, nn.Module):
        raise SpecError(
            f"family {arch.family!r} returned a {type(model).__name__}, not a torch nn.Module"
        )
    output_layer(model, arch.output_layer)
    return model


def output_layer(model: nn.Module, name: str) -> nn.Module:
    """The submodule ``name`` of ``model`` (dotted names reach nested layers).

    Raises:
        SpecError: ``model`` has no such submodule.
    """
    try:
        return model.get_submodule(name)
    except AttributeError:
        children = [n for n, _ in model.named_children()]
        raise SpecError(
            f"the model has no output layer {name!r} (its top-level layers: {children}); name "
            "the output layer 'classifier', or set output_layer: <name> in the search space"
        ) from None


def import_family(family: str) -> Callable[..., nn.Module]:
    """The function of a user-written family ``package.module:function``.

    Raises:
        SpecError: The module or the function cannot be imported.
    """
    return import_plugin(family, "family")
