"""Space, data and target checked together before any trial: in the service, the CLI, workers
and the REST API."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
import yaml

from automl.errors import SpecError
from automl.inputs import synthetic
from automl.search.compat import check_compatible, pruned_units
from automl.search.space import SearchSpace, load_space
from automl.targets import load_target

pytest_plugins = ["family_data"]
CPU = load_target("cpu")


def _space(family: str, *, output_layer: str | None = None, **params: dict) -> SearchSpace:
    values = {
        "arch.family": {"type": "fixed", "value": family},
        "arch.width": {"type": "fixed", "value": 8},
        "pruning_ratio": {"type": "categorical", "choices": [0.0, 0.5]},
        **params,
    }
    return SearchSpace(name="s", params=values, output_layer=output_layer)


@pytest.mark.parametrize(
    ("family", "data", "message"),
    [
        (
            "transformer",
            "digits",
            r"search space 's': family 'transformer' needs int64 token ids \(N, L\) with "
            r"vocab_size in the dataset; the data has float32 samples of shape \(1, 8, 8\): "
            r"use one of \['cnn', 'mlp', 'mobilenet', 'resnet'\]$",
        ),
        (
            "cnn",
            "tokens",
            r"family 'cnn' needs \(C, L\) or \(C, H, W\) float inputs; the data holds int64 "
            r"token ids of shape \(16,\) \(vocab_size 32\): use family 'transformer'",
        ),
        ("mlp", "tokens", r"family 'mlp' needs float features; the data holds int64 token ids"),
        ("transformer", "signals", r"the data has float32 samples of shape \(1, 64\)"),
    ],
)
def test_a_family_that_cannot_take_the_data_is_refused(family_data, digits, family, data, message):
    dataset = digits if data == "digits" else family_data[data]
    with pytest.raises(SpecError, match=message):
        check_compatible(_space(family), dataset, CPU)


def test_flat_features_suggest_the_mlp_and_the_1d_layout(tmp_path):
    from automl.inputs.data import load_dataset

    arrays = synthetic.signals(n_train=40, n_test=20)
    arrays = {k: v.reshape(len(v), -1) if k.startswith("x_") else v for k, v in arrays.items()}
    np.savez(tmp_path / "flat.npz", **arrays)
    flat = load_dataset(str(tmp_path / "flat.npz"))
    with pytest.raises(SpecError, match=r"use one of \['mlp'\] \(save 1-D samples as \(N, 1, L\)"):
        check_compatible(_space("resnet"), flat, CPU)


def test_the_shipped_spaces_fit_their_data_and_digits_cnn_now_takes_signals(family_data):
    check_compatible(load_space("signals-cnn"), family_data["signals"], CPU)
    check_compatible(load_space("images-resnet"), family_data["images"], CPU)
    check_compatible(load_space("text-transformer"), family_data["tokens"], CPU)
    # The issue's failure: 1-D samples (N, 1, L) with digits-cnn failed every trial.
    check_compatible(load_space("digits-cnn"), family_data["signals"], CPU)
    check_compatible(load_space("digits-mixed"), family_data["signals"], CPU)


def test_a_categorical_family_is_checked_choice_by_choice(family_data):
    space = _space("mlp", **{"arch.family": {"type": "categorical", "choices": ["cnn", "mlp"]}})
    check_compatible(space, family_data["signals"], CPU)
    with pytest.raises(SpecError, match="family 'cnn' needs"):
        check_compatible(space, family_data["tokens"], CPU)


def test_transformer_widths_must_split_into_every_heads_value(family_data):
    space = _space(
        "transformer",
        **{
            "arch.width": {"type": "int", "low": 16, "high": 40, "step": 4},
            "arch.heads": {"type": "categorical", "choices": [2, 4, 8]},
        },
    )
    with pytest.raises(SpecError, match=r"width 20 does not split into 8 heads: .*\[2, 4, 8\]"):
        check_compatible(space, family_data["tokens"], CPU)


def test_a_method_the_target_does_not_run_is_refused(digits):
    space = _space("mlp", method={"type": "categorical", "choices": ["fp32", "int8-trt"]})
    with pytest.raises(SpecError, match=r"names methods \['int8-trt'\], which target 'cpu'"):
        check_compatible(space, digits, CPU)


def test_a_runtime_the_target_lacks_or_one_that_lacks_a_method_is_refused(digits):
    methods = {"type": "categorical", "choices": ["fp32", "int8-dynamic"]}
    runtimes = {"type": "categorical", "choices": ["ort-cpu", "openvino"]}
    with pytest.raises(SpecError, match=r"runtime 'openvino', which does not run methods \['int8-"):
        check_compatible(_space("mlp", method=methods, runtime=runtimes), digits, CPU)
    gpu = {"type": "categorical", "choices": ["ort-cpu", "ort-cuda"]}
    with pytest.raises(SpecError, match="offers the runtimes ort-cpu, openvino, not 'ort-cuda'"):
        check_compatible(_space("mlp", runtime=gpu), digits, CPU)
    mixed = {"type": "categorical", "choices": ["fp32", "int8-mixed"]}
    with pytest.raises(SpecError, match=r"times no single layer, with \['int8-mixed'\]"):
        check_compatible(_space("mlp", method=mixed, runtime=runtimes), digits, CPU)
    check_compatible(load_space("digits-runtimes"), digits, CPU)


GPU_TARGETS = ["a100", "h100", "h200", "rtx4090"]


@pytest.mark.parametrize("target", GPU_TARGETS)
@pytest.mark.parametrize(
    ("knob", "message"),
    [
        (
            {"bits": {"type": "categorical", "choices": [32, 16, 8]}},
            r"suggests bits that mean methods \['int8-static'\]",
        ),
        (
            {
                "bits": {"type": "fixed", "value": 8},
                "int8_mode": {"type": "categorical", "choices": ["static", "dynamic"]},
            },
            r"suggests bits that mean methods \['int8-dynamic', 'int8-static'\]",
        ),
        ({"bits": {"type": "fixed", "value": 4}}, r"suggests bits \[4\]"),
        (
            {"method": {"type": "categorical", "choices": ["fp16", "int8-dynamic", "int8-trt"]}},
            r"names methods \['int8-dynamic'\]",
        ),
        ({"method": {"type": "fixed", "value": "int4-weight"}}, r"names methods \['int4-weight'\]"),
    ],
)
def test_an_nvidia_target_refuses_cpu_methods_at_load(digits, target, knob, message):
    with pytest.raises(SpecError, match=rf"{message}, which target '{target}' cannot run"):
        check_compatible(_space("mlp", **knob), digits, load_target(target))


@pytest.mark.parametrize("target", GPU_TARGETS)
def test_an_nvidia_target_runs_fp32_fp16_and_int8_through_tensorrt(digits, target):
    bits = {"bits": {"type": "categorical", "choices": [32, 16]}}
    methods = {"method": {"type": "categorical", "choices": ["fp32", "fp16", "int8-trt"]}}

    check_compatible(_space("mlp", **bits), digits, load_target(target))
    check_compatible(_space("mlp", **methods), digits, load_target(target))


def test_a_user_family_that_builds_prunes_and_exports_passes(family_data):
    dilation = {"type": "categorical", "choices": [2, 3]}
    space = _space(
        "user_families:dilated_conv", output_layer="head", **{"arch.extra.dilation": dilation}
    )
    check_compatible(space, family_data["signals"], CPU)
    candidate = space.suggest(
        optuna.trial.FixedTrial({"pruning_ratio": 0.5, "arch.extra.dilation": 3})
    )
    assert candidate.arch.extra == {"dilation": 3} and candidate.arch.output_layer == "head"


@pytest.mark.parametrize(
    ("family", "output_layer", "message"),
    [
        ("no_such_module:f", None, r"'no_such_module:f' failed at import on float32 samples of "
         r"shape \(1, 64\): ModuleNotFoundError: No module named 'no_such_module'"),
        ("user_families:missing", None, r"failed at import .*has no attribute 'missing'"),
        ("user_families:refuses_to_build", None, r"failed at build .*: ValueError: this family"),
        ("user_families:not_a_module", None, r"failed at build .*returned a dict"),
        ("user_families:unnamed_output", None,
         r"failed at build .*no output layer 'classifier' .*set output_layer: <name>"),
        ("user_families:cannot_prune", "head", r"failed at prune .*no longer runs .*RuntimeError"),
        ("user_families:cannot_export", "head", r"failed at export .*bessel_j0"),
    ],
)  # fmt: skip
def test_a_user_family_is_refused_at_the_stage_that_fails(
    family_data, family, output_layer, message
):
    with pytest.raises(SpecError, match=message):
        check_compatible(_space(family, output_layer=output_layer), family_data["signals"], CPU)


def _signals_npz(folder) -> str:
    path = folder / "signals.npz"
    np.savez(path, **synthetic.signals(n_train=60, n_test=20, length=40))  # (N, 1, 40)
    return str(path)


def test_the_cli_refuses_with_one_line_exit_2_and_no_study(cli):
    dataset = _signals_npz(cli.root)
    out = cli("study", "start", "--space", "text-transformer", "--dataset", dataset,
              "--n-trials", "2", check=False)  # fmt: skip
    assert out.returncode == 2, out.stderr
    error = " ".join(out.stderr.split())  # rich wraps long lines
    assert "family 'transformer' needs int64 token ids" in error
    assert "float32 samples of shape (1, 40)" in error
    assert optuna.get_all_study_summaries(cli.storage) == []


def test_a_detached_study_is_skipped_by_workers_with_a_log_line(cli):
    # A plugin dataset may live on the workers only: --detach creates the study unchecked.
    cli("study", "start", "--space", "signals-cnn", "--dataset", "automl.inputs.synthetic:tokens",
        "--n-trials", "2", "--name", "mismatch", "--detach")  # fmt: skip
    out = cli("worker", "--target", "cpu", "--studies", "mismatch", check=False)
    error = " ".join(out.stderr.split())
    assert "study mismatch cannot run on this worker" in error
    assert "family 'cnn' needs (C, L) or (C, H, W) float inputs" in error
    (summary,) = optuna.get_all_study_summaries(cli.storage)
    assert summary.n_trials == 0


def test_the_issue_s_signals_now_run_with_the_digits_cnn_space(cli):
    """`--space digits-cnn --dataset signals.npz` with (N, 1, 40) samples failed every trial."""
    space = load_space("digits-cnn").model_dump(mode="json", exclude_none=True)
    space["params"]["train.epochs"] = {"type": "fixed", "value": 1}
    (cli.root / "space.yaml").write_text(yaml.safe_dump(space, sort_keys=False))
    out = cli("study", "start", "--space", "space.yaml", "--dataset", _signals_npz(cli.root),
              "--n-trials", "2", "--name", "signals", "--no-remeasure-front")  # fmt: skip
    assert "ended: done" in out.stdout
    study = optuna.load_study(study_name="signals", storage=cli.storage)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]


def test_extra_knobs_need_a_name_and_output_layer_applies_to_user_families_only():
    with pytest.raises(ValueError, match=r"unknown key 'arch\.extra\.2x'"):
        _space("mlp", **{"arch.extra.2x": {"type": "fixed", "value": 1}})
    mixed = _space(
        "cnn", output_layer="head",
        **{"arch.family": {"type": "categorical", "choices": ["cnn", "user_families:dilated_conv"]}},
    )  # fmt: skip
    families = ("cnn", "user_families:dilated_conv")
    trials = {
        f: optuna.trial.FixedTrial({"arch.family": f, "pruning_ratio": 0.0}) for f in families
    }
    archs = {family: mixed.suggest(trial).arch for family, trial in trials.items()}
    assert archs["cnn"].output_layer == "classifier"
    assert archs["user_families:dilated_conv"].output_layer == "head"


@pytest.fixture(scope="module")
def wine(tmp_path_factory) -> str:
    """scikit-learn's wine table (13 features, 3 classes named as strings) as an .npz."""
    from sklearn.datasets import load_wine

    x, y = load_wine(return_X_y=True)
    labels = np.array(["barolo", "grignolino", "barbera"])[y]
    path = tmp_path_factory.mktemp("wine") / "wine.npz"
    np.savez(path, x_train=x[::2], y_train=labels[::2], x_test=x[1::2], y_test=labels[1::2])
    return str(path)


def test_int4_on_few_features_is_refused_where_a_pruned_mlp_keeps_too_few(wine, family_data):
    from automl.inputs.data import load_dataset

    message = (
        r"^search space 'digits-mlp': it can draw int4-weight .* K >= 16 rows; on these 13 "
        r"features an mlp of arch.width 16 pruned 0.1 keeps 8 units \(multiples of 8 on target "
        r"'cpu'\), so such a trial has none and would fail: use the shipped 'tabular-mlp' space"
    )
    with pytest.raises(SpecError, match=message):
        check_compatible(load_space("digits-mlp"), load_dataset(wine), CPU)
    check_compatible(load_space("tabular-mlp"), load_dataset(wine), CPU)
    check_compatible(load_space("digits-mlp"), family_data["features"], CPU)  # 64 features


@pytest.mark.parametrize(("width", "ratio"), [(16, 0.1), (16, 0.6), (32, 0.5), (40, 0.3)])
def test_the_units_a_pruned_mlp_keeps_are_those_torch_pruning_keeps(wine, width, ratio):
    from automl.candidate import ArchConfig, TrainConfig
    from automl.inputs.data import load_dataset
    from automl.models import build_model
    from automl.pipeline.prune import prune

    data = load_dataset(wine)
    model = build_model(ArchConfig("mlp", width=width, depth=2), (13,), 3)
    pruned = prune(model, data, ratio, TrainConfig(epochs=0), round_to=8).model
    expected = pruned_units(width, int(width * (1 - ratio)), 8)
    assert pruned.classifier.in_features == expected


def test_the_tabular_space_runs_on_wine_and_its_narrowest_int4_model_completes(wine, tmp_path):
    """The study of docs/data.md's table example, its first trial the space's narrowest model
    with 4-bit weights (13 features, 32 units pruned by half), run by a worker's objective."""
    from optuna.artifacts import FileSystemArtifactStore

    from automl.search.spec import parse_spec
    from automl.service.create import create_study
    from automl.trials.objective import StudyObjective

    spec = parse_spec({"search_space": "tabular-mlp", "dataset": wine, "n_trials": 8})
    study = create_study(spec, optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/s.db"))
    narrowest = {"arch.width": 32, "arch.depth": 1, "arch.dropout": 0.0, "pruning_ratio": 0.5}
    study.enqueue_trial({**narrowest, "method": "int4-weight", "batch_size": 1})
    objective = StudyObjective(spec, FileSystemArtifactStore(str(tmp_path)))
    objective.check_inputs()
    study.optimize(objective, n_trials=1)
    (trial,) = study.trials
    assert trial.state.name == "COMPLETE", trial.user_attrs.get("fail_reason")
    assert trial.params["method"] == "int4-weight" and trial.user_attrs["test_accuracy"] > 0.9
