from __future__ import annotations

import pytest
from family_cases import CONV_FAMILIES

from automl.candidate import ArchConfig, TrainConfig
from automl.errors import SpecError
from automl.models import attention_heads, build_model
from automl.pipeline.export import export_onnx
from automl.pipeline.prune import prune
from automl.pipeline.train import accuracy, train

pytest_plugins = ["family_data"]


@pytest.mark.parametrize("family", ["mlp", *CONV_FAMILIES])
def test_pruning_shrinks_macs_and_stays_exportable(digits, family, tmp_path):
    model = build_model(ArchConfig(family, 16, 2), digits.input_shape, digits.num_classes)
    trained = train(model, digits, TrainConfig(epochs=2)).model
    result = prune(trained, digits, 0.5, TrainConfig(epochs=1))
    share = result.macs_after / result.macs_before
    # Removing half the channels cuts MACs to between (1-r)^2 (both sides pruned) and (1-r).
    assert 0.25 * 0.8 <= share <= 0.5 * 1.1
    assert result.params_after < result.params_before
    assert result.model.classifier.out_features == digits.num_classes
    exported = export_onnx(result.model, digits.x_test[:16], tmp_path / "pruned.onnx")
    assert exported.max_abs_diff < 1e-4


def test_fine_tune_recovers_accuracy(digits):
    model = build_model(ArchConfig("cnn", 32, 2), digits.input_shape, digits.num_classes)
    trained = train(model, digits, TrainConfig(epochs=6)).model
    before = accuracy(trained, digits.x_test, digits.y_test)
    result = prune(trained, digits, 0.5, TrainConfig(epochs=3))
    assert len(result.history) == 3
    assert accuracy(result.model, digits.x_test, digits.y_test) > before - 0.05


def test_ratio_zero_leaves_the_model_untouched(digits):
    model = build_model(ArchConfig("mlp", 16, 1), digits.input_shape, digits.num_classes)
    result = prune(model, digits, 0.0, TrainConfig(epochs=1))
    assert result.macs_after == result.macs_before and result.history == ()


def test_bad_ratio(digits):
    model = build_model(ArchConfig("mlp", 16, 1), digits.input_shape, digits.num_classes)
    with pytest.raises(SpecError, match="pruning_ratio"):
        prune(model, digits, 1.0, TrainConfig(epochs=1))


def test_a_transformer_loses_whole_heads_and_mlp_channels_not_its_width(family_data):
    data = family_data["tokens"]
    arch = ArchConfig("transformer", 32, 2, heads=4, mlp_ratio=2.0)
    model = build_model(arch, data.input_shape, data.num_classes, vocab_size=data.vocab_size)
    result = prune(model, data, 0.5, TrainConfig(epochs=0))
    for layer in result.model.layers:
        assert layer.attn.num_heads == 2 and layer.attn.head_dim == 8
        assert layer.attn.q.out_features == layer.attn.k.out_features == 16
        assert layer.attn.out.in_features == 16 and layer.attn.out.out_features == 32
        assert layer.fc1.out_features == 32  # of 64
    assert result.model.embed.embedding_dim == 32 == result.model.classifier.in_features
    assert set(attention_heads(result.model).values()) == {2}


def test_the_output_layer_a_space_names_is_left_alone(family_data):
    data = family_data["signals"]
    arch = ArchConfig("user_families:dilated_conv", 16, 2, output_layer="head")
    model = build_model(arch, data.input_shape, data.num_classes)
    result = prune(model, data, 0.5, TrainConfig(epochs=0), output_layer="head")
    assert result.model.head.out_features == data.num_classes
    assert result.model.head.in_features == 8
    with pytest.raises(SpecError, match="no output layer 'classifier'"):
        prune(build_model(arch, data.input_shape, data.num_classes), data, 0.5, TrainConfig())


@pytest.mark.parametrize("family", CONV_FAMILIES)
def test_pruning_keeps_a_multiple_of_the_channel_block(digits, family):
    def widths(round_to: int | None) -> set[int]:
        model = build_model(ArchConfig(family, 64, 2), digits.input_shape, digits.num_classes)
        pruned = prune(model.eval(), digits, 0.2, TrainConfig(epochs=0), round_to=round_to)
        return {m.out_channels for m in pruned.model.modules() if hasattr(m, "out_channels")}

    assert any(w % 8 for w in widths(None))  # what the ratio alone gives: off the block
    rounded = widths(8)
    assert all(w % 8 == 0 for w in rounded) and max(rounded) < 64
