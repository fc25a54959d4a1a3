from __future__ import annotations

import pytest
import torch

from automl.candidate import FAMILIES, ArchConfig
from automl.errors import SpecError
from automl.models import build_model


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(("shape", "classes"), [((1, 8, 8), 10), ((3, 16, 12), 4)])
def test_every_family_builds_for_any_image_shape(family, shape, classes):
    model = build_model(ArchConfig(family, width=8, depth=2), shape, classes)
    assert model(torch.zeros(3, *shape)).shape == (3, classes)
    assert isinstance(model.classifier, torch.nn.Linear)


def test_width_and_depth_change_the_model():
    def count(**kw):
        model = build_model(ArchConfig("resnet", **kw), (1, 8, 8), 10)
        return sum(p.numel() for p in model.parameters())

    assert count(width=16, depth=2) > count(width=8, depth=2)
    assert count(width=8, depth=3) > count(width=8, depth=2)


def test_mlp_takes_flat_features_and_conv_families_refuse_them():
    assert build_model(ArchConfig("mlp", 8, 1), (20,), 3)(torch.zeros(2, 20)).shape == (2, 3)
    with pytest.raises(SpecError, match="needs image inputs"):
        build_model(ArchConfig("cnn", 8, 1), (20,), 3)


def test_bad_arch_is_a_spec_error():
    with pytest.raises(SpecError, match="unknown model family 'vit'"):
        ArchConfig("vit", 8, 1)
    with pytest.raises(SpecError, match="width and depth"):
        ArchConfig("cnn", 0, 1)
    with pytest.raises(SpecError, match="kernel_size"):
        ArchConfig("cnn", 8, 1, kernel_size=4)
