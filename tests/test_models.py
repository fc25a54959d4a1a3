from __future__ import annotations

import pytest
import torch
from family_cases import CONV_FAMILIES

from automl.candidate import ArchConfig
from automl.errors import SpecError
from automl.models import attention_heads, build_model


@pytest.mark.parametrize("family", ["mlp", *CONV_FAMILIES])
@pytest.mark.parametrize(("shape", "classes"), [((1, 8, 8), 10), ((3, 16, 12), 4), ((2, 40), 3)])
def test_feature_families_build_for_1d_and_2d_inputs(family, shape, classes):
    model = build_model(ArchConfig(family, width=8, depth=2), shape, classes)
    assert model(torch.zeros(3, *shape)).shape == (3, classes)
    assert isinstance(model.classifier, torch.nn.Linear)


@pytest.mark.parametrize("family", CONV_FAMILIES)
@pytest.mark.parametrize("shape", [(1, 40), (3, 32, 32)])
def test_stages_downsample_and_widen_in_the_data_s_dimensions(family, shape):
    arch = ArchConfig(family, width=8, depth=2, stages=3, width_growth=2.0)
    model = build_model(arch, shape, 5)
    kinds = {type(m) for m in model.modules() if isinstance(m, torch.nn.Conv1d | torch.nn.Conv2d)}
    assert kinds == {torch.nn.Conv1d if len(shape) == 2 else torch.nn.Conv2d}
    features = model.features(torch.zeros(2, *shape))
    assert features.shape[1] == 32 == model.classifier.in_features  # 8 → 16 → 32
    assert features.shape[2:] == tuple((d + 3) // 4 for d in shape[1:])  # halved twice
    assert model(torch.zeros(2, *shape)).shape == (2, 5)


def test_stages_cut_the_work_on_large_images():
    def activations(stages: int) -> int:  # of six conv layers after the stem
        model = build_model(ArchConfig("cnn", 8, 6 // stages, stages=stages), (3, 64, 64), 4)
        x, total = torch.zeros(1, 3, 64, 64), 0
        for layer in model.features:
            x = layer(x)
            total += x.numel() if isinstance(layer, torch.nn.Conv2d) else 0
        return total

    assert activations(3) < activations(1) / 2


def test_one_stage_keeps_the_digits_models():
    """Defaults build the models of old: every layer at full resolution, fixed width."""
    model = build_model(ArchConfig("resnet", 16, 2), (1, 8, 8), 10, seed=0)
    assert model.features(torch.zeros(1, 1, 8, 8)).shape == (1, 16, 8, 8)
    names = [name for name, _ in model.state_dict().items() if "shortcut" in name]
    assert names == []  # identity shortcuts only: the state dict keys of old


def test_width_and_depth_change_the_model():
    def count(**kw):
        model = build_model(ArchConfig("resnet", **kw), (1, 8, 8), 10)
        return sum(p.numel() for p in model.parameters())

    assert count(width=16, depth=2) > count(width=8, depth=2)
    assert count(width=8, depth=3) > count(width=8, depth=2)


def test_transformer_takes_token_ids_and_its_heads_are_prunable_groups():
    arch = ArchConfig("transformer", width=32, depth=2, heads=4, mlp_ratio=2.0)
    model = build_model(arch, (12,), 3, vocab_size=50)
    tokens = torch.randint(0, 50, (5, 12))
    assert model(tokens).shape == (5, 3)
    assert model.embed.num_embeddings == 50 and model.position.num_embeddings == 12
    assert model.layers[0].fc1.out_features == 64
    heads = attention_heads(model)
    assert len(heads) == 2 * 3 and set(heads.values()) == {4}
    # Order matters: the same tokens in another order give other logits.
    assert not torch.allclose(model(tokens), model(tokens.flip(1)))


def test_conv_and_transformer_refuse_inputs_they_cannot_take():
    with pytest.raises(SpecError, match=r"needs \(C, L\) or \(C, H, W\)"):
        build_model(ArchConfig("cnn", 8, 1), (20,), 3)
    with pytest.raises(SpecError, match="needs int64 token ids"):
        build_model(ArchConfig("transformer", 8, 1, heads=2), (1, 8, 8), 3)


def test_bad_arch_is_a_spec_error():
    with pytest.raises(SpecError, match="unknown model family 'vit'"):
        ArchConfig("vit", 8, 1)
    with pytest.raises(SpecError, match="width and depth"):
        ArchConfig("cnn", 0, 1)
    with pytest.raises(SpecError, match="kernel_size"):
        ArchConfig("cnn", 8, 1, kernel_size=4)
    with pytest.raises(SpecError, match=r"stages must be in 1\.\.8"):
        ArchConfig("cnn", 8, 1, stages=9)
    with pytest.raises(SpecError, match="last stage would be 8192 wide"):
        ArchConfig("cnn", 64, 1, stages=8, width_growth=2.0)
    with pytest.raises(SpecError, match="not divisible by heads 3"):
        ArchConfig("transformer", 32, 1, heads=3)
    with pytest.raises(SpecError, match=r"'cnn' has no knob arch\.extra\.dilation"):
        ArchConfig("cnn", 8, 1, extra={"dilation": 2})
    with pytest.raises(SpecError, match="for user-written families"):
        ArchConfig("cnn", 8, 1, output_layer="head")


def test_a_user_family_gets_its_knobs_and_names_its_output_layer():
    arch = ArchConfig(
        "user_families:dilated_conv", 8, 2, extra={"dilation": 3}, output_layer="head"
    )
    model = build_model(arch, (1, 30), 4)
    assert model.body[0].dilation == (3,)
    assert model(torch.zeros(2, 1, 30)).shape == (2, 4)
    unnamed = ArchConfig("user_families:unnamed_output", 8, 1)
    with pytest.raises(SpecError, match=r"no output layer 'classifier'.*'body', 'head'"):
        build_model(unnamed, (1, 30), 4)
    with pytest.raises(SpecError, match=r"returned a dict, not a torch nn\.Module"):
        build_model(ArchConfig("user_families:not_a_module", 8, 1), (1, 30), 4)
