"""A trained model's spec, its space, and the baseline trial's params."""

from __future__ import annotations

import pytest

from automl.errors import SpecError
from automl.search.baseline import baseline_batch, baseline_params
from automl.search.space import SearchSpace, load_space
from automl.search.spec import parse_spec

MODEL = {"factory": "pkg.mod:build", "weights": "w.pt"}


def test_a_trained_models_spec_defaults_to_speedup_against_accuracy_drop():
    spec = parse_spec({"model": MODEL})
    assert spec.search_space == "trained-model"
    assert [(o.metric, o.direction, o.scale) for o in spec.objectives] == [
        ("accuracy_drop", "minimize", "linear"),
        ("speedup", "maximize", "log"),
    ]
    assert [str(c) for c in spec.constraints] == ["accuracy_drop <= 0.01"]
    assert spec.name == f"{MODEL['factory'].partition(':')[2]}-cpu"  # distinct per model
    assert parse_spec(spec.model_dump(mode="json")) == spec  # stored and read back


def test_given_objectives_and_constraints_are_kept():
    spec = parse_spec({"model": MODEL, "objectives": [{"metric": "size_ratio"}], "constraints": []})
    assert spec.metric_names == ["size_ratio"] and spec.constraints == []


@pytest.mark.parametrize(
    "values",
    [
        {"objectives": [{"metric": "speedup"}]},
        {"constraints": ["accuracy_drop <= 0.01"]},
    ],
)
def test_metrics_against_a_baseline_need_a_trained_model(values):
    with pytest.raises(SpecError, match="compare with the baseline of a trained model"):
        parse_spec(values)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"factory": "not a factory", "weights": "w.pt"}, "must look like 'package.module"),
        ({"factory": "a:b"}, "weights"),
        ({**MODEL, "batch_size": 0}, "greater than or equal to 1"),
    ],
)
def test_a_malformed_model_is_refused(model, message):
    with pytest.raises(SpecError, match=message):
        parse_spec({"model": model})


def test_an_accuracy_drop_bound_outside_its_range_is_refused():
    with pytest.raises(SpecError, match="can never hold"):
        parse_spec({"model": MODEL, "constraints": ["accuracy_drop <= -1"]})


def test_the_baseline_is_the_unmodified_model_at_the_smallest_batch():
    spec = parse_spec({"model": MODEL})
    space = load_space("trained-model")
    assert baseline_batch(spec, space) == 1
    params = baseline_params(spec, space)
    assert params["pruning_ratio"] == 0.0 and params["method"] == "fp32"
    assert params["batch_size"] == 1
    assert set(params) == set(space.params) - {"keep_fp32"}  # it applies to int8-mixed only


def test_the_spec_can_name_the_baseline_batch():
    spec = parse_spec({"model": {**MODEL, "batch_size": 8}})
    assert baseline_params(spec, load_space("trained-model"))["batch_size"] == 8


def _space(**params) -> SearchSpace:
    return SearchSpace.model_validate({"name": "s", "params": params})


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"pruning_ratio": {"type": "float", "low": 0.2, "high": 0.5}},
            "pruning_ratio must allow 0.0",
        ),
        (
            {"method": {"type": "categorical", "choices": ["int8-static"]}},
            "method must allow 'fp32'",
        ),
        ({"batch_size": {"type": "categorical", "choices": [4, 8]}}, "batch_size must allow 1"),
    ],
)
def test_a_space_that_cannot_express_the_baseline_is_refused(params, message):
    spec = parse_spec({"model": {**MODEL, "batch_size": 1}})
    with pytest.raises(SpecError, match=f"cannot express the baseline: {message}"):
        baseline_params(spec, _space(**params))


def test_a_space_fits_one_kind_of_study():
    with pytest.raises(SpecError, match=r"sets \['arch.family', 'arch.width'"):
        load_space("digits-cnn").check_model(trained=True)
    with pytest.raises(SpecError, match=r"sets no arch.family: it tunes a trained model"):
        load_space("trained-model").check_model(trained=False)
    load_space("trained-model").check_model(trained=True)
    load_space("digits-cnn").check_model(trained=False)


def test_a_space_with_arch_knobs_but_no_family_is_refused():
    with pytest.raises(ValueError, match=r"sets \['arch.width'\] but not arch.family"):
        _space(**{"arch.width": {"type": "fixed", "value": 8}})
