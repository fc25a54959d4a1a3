from __future__ import annotations

import re

import numpy as np
import optuna
import pytest

from automl.errors import SpecError
from automl.search.compat import check_target
from automl.search.space import SearchSpace, candidate_from_values, list_spaces, load_space
from automl.targets import load_target

# The shipped spaces made for NVIDIA targets, and one of those targets.
GPU_SPACES = {"digits-gpu": "a100", "digits-trt": "a100"}


def test_shipped_spaces():
    assert {"digits-cnn", "digits-mlp", "digits-mixed", *GPU_SPACES} <= set(list_spaces())
    for name in list_spaces():
        check_target(load_space(name), load_target(GPU_SPACES.get(name, "cpu")))


def test_mixed_space_searches_all_knobs_jointly_with_conditionals():
    space = load_space("digits-mixed")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = {"family": set(), "bits": set(), "batch": set(), "ratio": set()}
    for _ in range(60):
        trial = study.ask()
        candidate = space.suggest(trial)
        seen["family"].add(candidate.arch.family)
        seen["bits"].add(candidate.bits)
        seen["batch"].add(candidate.batch_size)
        seen["ratio"].add(candidate.pruning_ratio)
        assert ("arch.kernel_size" in trial.params) == (candidate.arch.family != "mlp")
        assert ("int8_mode" in trial.params) == (candidate.bits == 8)
        study.tell(trial, 0.0)
    assert seen["family"] == {"mlp", "cnn", "resnet", "mobilenet"}
    assert seen["bits"] == {32, 16, 8}
    assert len(seen["batch"]) > 1 and len(seen["ratio"]) > 1


def _write(tmp_path, body: str):
    path = tmp_path / "space.yaml"
    path.write_text("name: t\nparams:\n  arch.family: {type: fixed, value: mlp}\n" + body)
    return path


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("  arch.colour: {type: int, low: 1, high: 2}\n", "unknown key 'arch.colour'"),
        ("  arch.width: {type: int, low: 9, high: 2}\n", "empty range: low 9 > high 2"),
        ("  train.lr: {type: float, low: 0.0, high: 1.0, log: true}\n", "log range needs low > 0"),
        ("  bits: {type: categorical, choices: []}\n", "choices"),
        ("  bits: {type: uniform, low: 1, high: 2}\n", "bits"),
        ("  x: {type: fixed, value: 1, sets: bits, when: {nope: [1]}}\n", "not declared before"),
        ("  arch.width: {type: int, low: 1, high: 2, stepp: 1}\n", "stepp"),
        ("  arch.width: {type: int, low: 8, high: 20000000}\n", "outside the allowed 1..4096"),
        ("  arch.depth: {type: categorical, choices: [1, 100000000000]}\n", "arch.depth 1..1e"),
        ("  bits: {type: int, low: 1, high: 100000000000}\n", "bits must be among"),
        ("  batch_size: {type: int, low: 1, high: 100000000000}\n", "outside the allowed"),
        ("  arch.kernel_size: {type: int, low: 3, high: 1000000000000}\n", "outside the allowed"),
    ],
)
def test_malformed_spaces_name_the_field(tmp_path, body, message):
    with pytest.raises(SpecError, match=message):
        load_space(str(_write(tmp_path, body)))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "  train.epochs: {type: fixed, value: 1e12}\n",
            r"parameter 'train.epochs' takes a number, not the text '1e12' \(YAML reads 1e12 as "
            r"text: write 1000000000000\)",
        ),
        ("  train.epochs: {type: fixed, value: 1000000000000}\n", "outside the allowed 0..1000"),
        (
            "  lr: {type: categorical, choices: [0.01, 1e-3], sets: train.lr}\n",
            r"parameter 'lr' \(train.lr\) takes a number, not the text '1e-3' .*write 1.0e-3, "
            "with a dot and a signed exponent",
        ),
        ("  arch.width: {type: fixed, value: wide}\n", "takes a number, not the text 'wide'"),
        ("  batch_size: {type: categorical, choices: [1, 2.5]}\n", "whole numbers, not 2.5"),
        ("  train.epochs: {type: float, low: 1, high: 3}\n", "whole numbers: make it type int"),
    ],
)
def test_a_number_given_as_text_or_a_fraction_is_refused_saying_how_to_write_it(
    tmp_path, body, message
):
    with pytest.raises(SpecError, match=message) as refused:
        load_space(str(_write(tmp_path, body)))
    assert "not supported between" not in str(refused.value)


def test_bit_width_the_target_cannot_run(tmp_path):
    space = load_space(str(_write(tmp_path, "  bits: {type: categorical, choices: [8, 4, 2]}\n")))
    with pytest.raises(SpecError, match=r"suggests bits \[2\].*supports \[4, 8, 16, 32\]"):
        check_target(space, load_target("cpu"))


def test_a_misspelt_key_is_named_with_the_key_it_resembles_and_no_pydantic_prefix(tmp_path):
    with pytest.raises(SpecError) as refused:
        load_space(str(_write(tmp_path, "  arch.widht: {type: fixed, value: 8}\n")))
    first = str(refused.value).splitlines()[1]
    assert first.startswith("  parameter 'arch.widht' sets unknown key 'arch.widht'; did you")
    assert "did you mean 'arch.width'?" in first and "Value error" not in str(refused.value)


def test_unknown_space_lists_registered_ones():
    with pytest.raises(SpecError, match=r"unknown search space 'nope'; registered: .*digits-mixed"):
        load_space("nope")


def test_arch_knobs_need_a_family_and_no_family_means_a_trained_model(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: t\nparams:\n  arch.width: {type: fixed, value: 8}\n")
    with pytest.raises(SpecError, match=r"sets \['arch.width'\] but not arch\.family"):
        load_space(str(path))
    path.write_text("name: t\nparams:\n  bits: {type: fixed, value: 8}\n")
    assert not load_space(str(path)).trains_models  # a space for a trained model


def test_unset_knobs_take_defaults_and_unbuildable_spaces_fail_at_load(tmp_path):
    space = load_space(str(_write(tmp_path, "  bits: {type: categorical, choices: [32, 8]}\n")))
    candidate = space.suggest(optuna.create_study().ask())
    assert (candidate.arch.width, candidate.arch.depth) == (32, 2)
    bad = _write(tmp_path, "  arch.kernel_size: {type: fixed, value: 4}\n")
    with pytest.raises(SpecError, match="kernel_size must be odd"):
        load_space(str(bad))


def test_deployments_list_every_knob_assignment_with_conditionals():
    space = load_space("digits-mixed")
    model = {"arch.family": "mlp", "arch.width": 8, "arch.depth": 1, "pruning_ratio": 0.0}
    deployments = space.deployments(model)
    assert len(deployments) == 16  # (fp32, fp16, int8 static, int8 dynamic) x 4 batches
    assert {"bits": 8, "int8_mode": "dynamic", "batch_size": 128} in deployments
    assert all(("int8_mode" in d) == (d["bits"] == 8) for d in deployments)
    assert len({tuple(sorted(d.items())) for d in deployments}) == 16


def test_deployments_are_not_listed_for_a_float_knob(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\nparams:\n  arch.family: {type: fixed, value: mlp}\n"
        "  serving.max_queue_delay_ms: {type: float, low: 0, high: 2}\n"
    )
    assert load_space(str(path)).deployments({}) is None


def test_a_huge_deployment_range_is_not_built(tmp_path):
    """Validation and variants never list an int range: 1e11 values would not fit in memory."""
    body = "  arch.width: {type: int, low: 8, high: 16}\n  bits: {type: fixed, value: 32}\n"
    path = _write(tmp_path, body + "  batch_size: {type: int, low: 1, high: 4096}\n")
    space = load_space(str(path))
    assert space.deployments({"arch.width": 8}) is not None  # 4096 batch sizes: listed
    wide = body + "  batch_size: {type: int, low: 1, high: 4096}\n"
    wide += "  int8_mode: {type: categorical, choices: [static, dynamic]}\n"
    assert load_space(str(_write(tmp_path, wide))).deployments({"arch.width": 8}) is None


def test_a_space_may_name_quantization_methods_directly(tmp_path):
    body = (
        "  arch.width: {type: fixed, value: 16}\n"
        "  method: {type: categorical, choices: [fp32, int8-dynamic, int4-weight]}\n"
    )
    space = load_space(str(_write(tmp_path, body)))
    check_target(space, load_target("cpu"))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(12):
        candidate = space.suggest(study.ask())
        assert candidate.bits == candidate.quant_method.bits
        seen.add(candidate.quant_method.name)
    assert seen == {"fp32", "int8-dynamic", "int4-weight"}
    old = candidate_from_values({"arch.family": "mlp", "bits": 8, "int8_mode": "dynamic"})
    assert old.quant_method.name == "int8-dynamic"  # the old form names the same method
    trt = load_space(str(_write(tmp_path, "  method: {type: fixed, value: int8-trt}\n")))
    with pytest.raises(SpecError, match=r"names methods \['int8-trt'\].*target 'cpu'"):
        check_target(trt, load_target("cpu"))
    with pytest.raises(SpecError, match="no-such"):
        load_space(str(_write(tmp_path, "  method: {type: fixed, value: no-such}\n")))


def test_every_numeric_knob_has_a_bound():
    from automl.search.space import KEYS
    from automl.settings import get_settings

    words = ("arch.family", "bits", "int8_mode", "method", "graph_optimization", "runtime")
    unbounded = [k for k in KEYS if k not in words and k not in get_settings().knob_bounds]
    assert not unbounded  # bits are checked against the methods' bit-widths


def test_a_serving_space_gives_its_scenario_and_times_isolated_latency_at_max_batch() -> None:
    from automl.search.space import SearchSpace, with_scenario
    from automl.search.spec import parse_spec

    space = load_space("digits-serving")
    spec = with_scenario(parse_spec({"search_space": "digits-serving"}), space)
    assert spec.serving.slo_p99_ms == 10 and spec.metric_names == ["accuracy", "max_rate_rps"]
    own = parse_spec({"search_space": "digits-serving", "serving": {"slo_p99_ms": 2}})
    assert with_scenario(own, space).serving.slo_p99_ms == 2  # the spec's own comes first
    bare = SearchSpace.model_validate(
        {"name": "b", "params": {"serving.max_batch": {"type": "fixed", "value": 8}}}
    )
    with pytest.raises(SpecError, match="searches serving settings: set a serving scenario"):
        with_scenario(parse_spec({}), bare)
    candidate = candidate_from_values({"arch.family": "mlp", "serving.max_batch": 8})
    assert candidate.batch_size == 8 and candidate.serving.max_batch == 8


@pytest.mark.parametrize(
    ("params", "refused"),
    [
        ("  method: {type: categorical, choices: [int8-mixed, int8-static]}\n"
         "  keep_fp32: {type: int, low: 1, high: 3}\n", "['int8-static']"),
        ("  bits: {type: categorical, choices: [32, 8]}\n"
         "  keep_fp32: {type: int, low: 1, high: 3}\n", "a bit-width"),
    ],
)  # fmt: skip
def test_keep_fp32_that_a_whole_graph_method_could_draw_is_refused_at_load(
    tmp_path, params, refused
):
    path = _write(tmp_path, params)
    with pytest.raises(SpecError, match=re.escape(refused)):
        load_space(str(path))
    conditional = params.replace("high: 3}", "high: 3, when: {method: [int8-mixed]}}")
    if "method" in params:  # with its 'when', the same space loads
        assert load_space(str(_write(tmp_path, conditional))).params["keep_fp32"].when


def test_keep_fp32_is_capped_below_the_layers_of_the_model_the_space_is_resolved_for(tmp_path):
    from automl.candidate import ArchConfig
    from automl.models import build_model
    from automl.pipeline.export import export_onnx
    from automl.pipeline.profile import SourceGraph

    model = build_model(ArchConfig("cnn", width=8, depth=2), (1, 8, 8), 10).eval()
    sample = np.random.default_rng(0).normal(size=(4, 1, 8, 8)).astype(np.float32)
    graph = export_onnx(model, sample, tmp_path / "cnn.onnx").path
    layers = len(SourceGraph(graph).layers)  # 2 Conv and the classifier
    space = load_space("trained-model").for_model(layers)  # keep_fp32 1..6
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    kept = set()
    for _ in range(40):
        trial = study.ask()
        kept.add(space.suggest(trial).keep_fp32)
        study.tell(trial, 0.0)
    assert kept == {0, *range(1, layers)}  # 0: another method; never all the layers


def test_a_keep_fp32_that_keeps_every_layer_of_the_model_is_refused() -> None:
    keep = {"type": "categorical", "choices": [2, 4], "when": {"method": ["int8-mixed"]}}
    space = SearchSpace.model_validate({"name": "s", "params": {
        "method": {"type": "categorical", "choices": ["fp32", "int8-mixed"]}, "keep_fp32": keep,
    }})  # fmt: skip
    assert space.for_model(4).params["keep_fp32"].choices == [2]
    with pytest.raises(SpecError, match=r"keep_fp32 \[2, 4\] keeps all 2 layers .* below 2"):
        space.for_model(2)


def test_the_trained_model_page_names_every_method_of_the_trained_model_space() -> None:
    from pathlib import Path

    page = " ".join((Path(__file__).parents[2] / "docs" / "models.md").read_text().split())
    described = page[page.index("on the shipped `trained-model` space") :].split(". ")[0]
    for method in load_space("trained-model").method_choices():
        assert f"`{method}`" in described, method


def test_capacity_first_takes_the_largest_batch_and_instances_and_the_middle_delay() -> None:
    space = SearchSpace.model_validate({"name": "s", "params": {
        "arch.family": {"type": "fixed", "value": "mlp"},
        "serving.max_batch": {"type": "categorical", "choices": [8, 1, 32]},
        "serving.max_queue_delay_ms": {"type": "categorical", "choices": [2.0, 0.0, 0.5]},
        "serving.instances": {"type": "int", "low": 1, "high": 3},
    }})  # fmt: skip

    assert space.capacity_first() == {
        "serving.max_batch": 32, "serving.max_queue_delay_ms": 0.5, "serving.instances": 3,
    }  # fmt: skip
    assert load_space("digits-mlp").capacity_first() == {}  # no serving knobs


@pytest.mark.filterwarnings("error::UserWarning")  # Optuna's, for a value out of range
@pytest.mark.parametrize("name", [*list_spaces(), "ranges"])
def test_drawn_params_are_what_optuna_stores_for_a_trial(tmp_path, name):
    ranges = (
        "  arch.width: {type: int, low: 8, high: 512, log: true}\n"
        "  arch.depth: {type: int, low: 1, high: 7, step: 2}\n"
        "  pruning_ratio: {type: float, low: 0.0, high: 0.6, step: 0.1}\n"
        "  train.lr: {type: float, low: 0.0001, high: 0.1, log: true}\n"
        "  bits: {type: categorical, choices: [32, 8]}\n"
        "  int8_mode: {type: categorical, choices: [static, dynamic], when: {bits: [8]}}\n"
    )
    space = load_space(str(_write(tmp_path, ranges)) if name == "ranges" else name)
    rng = np.random.default_rng(0)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        drawn = space.draw(rng)
        study.enqueue_trial(drawn)
        trial = study.ask()
        space.suggest(trial)  # an enqueued value outside its range would be drawn anew
        assert trial.params == drawn
        study.tell(trial, 0.0)
