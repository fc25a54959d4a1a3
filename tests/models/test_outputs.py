"""The logits of a trained model and the layer that gives them, found by running it."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from torch import nn

from automl.errors import SpecError
from automl.models import LogitsOf, find_output_layer, pick_logits

X = torch.randn(2, 6)


class Dicts(nn.Module):
    """Returns a dict, as a Hugging Face model returns a ModelOutput."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(6, 8)
        self.score = nn.Sequential(nn.Dropout(0.1), nn.Linear(8, 3))

    def forward(self, x: torch.Tensor) -> OrderedDict:
        hidden = self.body(x)
        return OrderedDict(hidden=hidden, logits=self.score(hidden))


class Functional(nn.Module):
    """Its logits come from a function, not a layer."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 3)
        self.b = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) + self.b(x)


def test_an_unnamed_sequential_gives_its_last_layer():
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    assert find_output_layer(model, X) == "2"


def test_a_final_activation_gives_the_last_layer_with_weights():
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3), nn.LogSoftmax(-1))
    assert find_output_layer(model, X) == "2"


def test_the_layer_inside_a_container_that_gives_the_logits_is_kept_whole():
    assert find_output_layer(LogitsOf(Dicts(), "logits"), X) == "model.score.1"
    body = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    wrapped = nn.Module()
    wrapped.body = body  # a container whose last layer gives the output: the rest is prunable
    wrapped.forward = lambda x: wrapped.body(x)
    assert find_output_layer(wrapped, X) == "body.2"


def test_logits_added_from_two_layers_are_ambiguous():
    with pytest.raises(SpecError, match=r"more than one layer .*\['a', 'b'\].*--output-layer"):
        find_output_layer(Functional(), X)


def test_logits_by_key_or_index():
    out = Dicts()(X)
    assert pick_logits(out, "logits") is out["logits"]
    assert pick_logits((out["logits"], out["hidden"]), 0) is out["logits"]
    assert LogitsOf(Dicts(), "logits")(X).shape == (2, 3)


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (
            None,
            r"returns a OrderedDict, not a tensor .*keys \['hidden', 'logits'\].*--model-output",
        ),
        ("scores", r"model.output 'scores' is not in the model's output"),
    ],
)
def test_a_missing_key_names_what_the_output_holds(key, message):
    with pytest.raises(SpecError, match=message):
        pick_logits(Dicts()(X), key)
