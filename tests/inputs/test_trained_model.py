"""Loading a user's trained model: the factory, the weights, and each refusal."""

from __future__ import annotations

import pytest
import torch

from automl.errors import SpecError
from automl.inputs.trained_model import open_trained, save_module


@pytest.fixture
def weights(tmp_path):
    from trained_factories import digits_cnn

    path = tmp_path / "w.pt"
    torch.save(digits_cnn().state_dict(), path)
    return path


def test_build_loads_the_saved_weights(weights):
    model = open_trained("trained_factories:digits_cnn", weights).build()
    saved = torch.load(weights, weights_only=True)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in saved.items())
    assert not model.training


def test_the_digest_follows_the_file(weights):
    first = open_trained("trained_factories:digits_cnn", weights).digest
    torch.save({k: v + 1 for k, v in torch.load(weights, weights_only=True).items()}, weights)
    assert open_trained("trained_factories:digits_cnn", weights).digest != first


def test_a_missing_weights_file_is_refused(tmp_path):
    with pytest.raises(SpecError, match=r"weights file .*nope.pt' does not exist"):
        open_trained("trained_factories:digits_cnn", tmp_path / "nope.pt")


def test_a_corrupt_weights_file_is_refused(tmp_path):
    path = tmp_path / "w.pt"
    path.write_bytes(b"not a torch file at all")
    with pytest.raises(SpecError, match=r"is not a state dict saved with torch.save"):
        open_trained("trained_factories:digits_cnn", path).build()


def test_a_pickled_module_is_refused_by_weights_only(tmp_path):
    from trained_factories import digits_cnn

    path = tmp_path / "w.pt"
    torch.save(digits_cnn(), path)  # the whole module: unpickling it would run code
    with pytest.raises(SpecError, match=r"a whole pickled model \(torch.save\(model\)\)") as e:
        open_trained("trained_factories:digits_cnn", path).build()
    assert "\x1b[" not in str(e.value) and "\n" not in str(e.value)  # torch's text, one line


def test_weights_of_other_shapes_are_refused_naming_them(weights):
    trained = open_trained("trained_factories:narrower_cnn", weights)
    with pytest.raises(SpecError, match=r"do not fit .*shape: features\.0\.weight \(48, 1, 3, 3\)"):
        trained.build()


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("trained_factories:nope", "cannot be imported"),
        ("no_such_module_here:build", "cannot be imported"),
        ("trained_factories:not_a_module", "returned str, not a torch nn.Module"),
    ],
)
def test_a_bad_factory_is_refused(weights, factory, message):
    with pytest.raises(SpecError, match=message):
        open_trained(factory, weights).build()


def test_an_in_memory_model_is_saved_as_its_class_and_weights(tmp_path):
    from trained_factories import DigitsCNN

    model = DigitsCNN()
    saved = save_module(model, tmp_path)
    assert saved["factory"] == "trained_factories:DigitsCNN"
    assert save_module(model, tmp_path) == saved  # once per content
    rebuilt = open_trained(saved["factory"], saved["weights"]).build()
    assert all(torch.equal(rebuilt.state_dict()[k], v) for k, v in model.state_dict().items())


def test_an_in_memory_model_whose_class_needs_arguments_is_refused(tmp_path):
    class Local(torch.nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.classifier = torch.nn.Linear(width, 2)

    with pytest.raises(SpecError, match="cannot be imported by name; pass model="):
        save_module(Local(3), tmp_path)
    with pytest.raises(SpecError, match="needs constructor arguments"):
        save_module(torch.nn.Linear(3, 2), tmp_path)
    sequential = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    with pytest.raises(SpecError, match="built with no arguments is another model"):
        save_module(sequential, tmp_path)  # Sequential() builds, empty
    assert list(tmp_path.iterdir()) == []


def test_weights_changed_after_they_were_opened_are_refused(weights):
    trained = open_trained("trained_factories:digits_cnn", weights)
    torch.save({k: v + 1 for k, v in torch.load(weights, weights_only=True).items()}, weights)
    with pytest.raises(SpecError, match="has changed since it was checked"):
        trained.build()
