"""A trained model's study end to end: the baseline trial, metrics against it, refusals."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import torch
from conftest import run_cli_study

import automl
from automl.candidate import TrainConfig
from automl.errors import SpecError
from automl.inputs.data import load_dataset
from automl.pipeline.prune import prune
from automl.pipeline.train import train

FACTORY = "trained_factories:digits_cnn"
# A small space whose pruned models recover within the 1 % budget after their fine-tune.
SPACE = """
name: trained-small
params:
  pruning_ratio: {type: categorical, choices: [0.0, 0.25]}
  finetune_epochs: {type: fixed, value: 3}
  finetune_lr: {type: fixed, value: 0.001}
  kd_alpha: {type: categorical, choices: [0.0, 0.5]}
  method: {type: categorical, choices: [fp32, int8-static]}
  batch_size: {type: categorical, choices: [1, 8]}
"""


@pytest.fixture
def weights(digits_cnn_weights):
    return digits_cnn_weights


def _optimize(tmp_path, model: dict, **spec):
    return automl.optimize(
        {"model": model, "n_trials": 8, "name": "trained", **spec},
        storage=f"sqlite:///{tmp_path}/s.db",
        artifacts_dir=tmp_path / "artifacts",
        progress=False,
        remeasure=False,
    )


@pytest.mark.slow
def test_a_study_of_a_trained_model_measures_its_baseline_and_beats_it(tmp_path, weights):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    model = {"factory": FACTORY, "weights": str(weights)}
    result = _optimize(tmp_path, model, search_space=str(space))
    study = optuna.load_study(study_name="trained", storage=f"sqlite:///{tmp_path}/s.db")
    trials = study.trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 8
    baseline = trials[0]
    assert baseline.user_attrs["baseline"] is True
    assert baseline.params["pruning_ratio"] == 0.0 and baseline.params["method"] == "fp32"
    assert baseline.params["batch_size"] == 1  # the space's smallest serving batch
    attrs = baseline.user_attrs
    assert (attrs["speedup"], attrs["accuracy_drop"], attrs["size_ratio"]) == (1.0, 0.0, 1.0)
    assert not any(t.user_attrs.get("baseline") for t in trials[1:])
    for trial in trials[1:]:
        figures = trial.user_attrs["history"]["baseline"]
        drop = figures["accuracy"] - trial.user_attrs["accuracy"]
        assert trial.user_attrs["accuracy_drop"] == pytest.approx(drop)
        assert figures["accuracy"] == attrs["accuracy"]  # the same unmodified model
        if figures["interleaved_ms"] is not None:  # on the CPU: the two graphs run in turn
            base, own = figures["interleaved_ms"]
            assert trial.user_attrs["speedup"] == pytest.approx(base / own)
    assert any(t.user_attrs["history"]["baseline"]["interleaved_ms"] for t in trials[1:])
    # Faster per sample than the baseline measured beside it, within the drop constraint.
    faster = [
        t for t in trials[1:]
        if max(t.user_attrs["speedup"], t.user_attrs["speedup_same_batch"]) > 1
        and t.user_attrs["accuracy_drop"] <= 0.01 and t.user_attrs["feasible"]
    ]  # fmt: skip
    assert faster, [
        (t.params, t.user_attrs["speedup"], t.user_attrs["accuracy_drop"]) for t in trials
    ]
    # No trial trains the model: it is loaded, and a deployment-only variant reuses the prune.
    assert all(t.user_attrs["history"]["train"] == [] for t in trials)
    variants = [t for t in trials if "variant_of" in t.user_attrs]
    assert variants and all(t.user_attrs["reused"]["prune"] for t in variants)

    front = result.front
    marked = [r for r in front if r["baseline"]]
    assert [r["number"] for r in marked] == [0]
    assert {r["number"] for r in front if r["on_front"]} == {t.number for t in study.best_trials}
    from automl.service.compare import compare_fronts

    compared = compare_fronts("trained", "trained", study._storage)["candidates"]
    on_it = {tuple(sorted(t.params.items())) for t in study.best_trials}
    assert len(compared) == len(on_it)  # the baseline beside the front is not on it
    page = result.report(tmp_path / "report.html").read_text()
    assert "baseline (the unmodified model)" in page and "<b>baseline</b>" in page


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"factory": FACTORY, "weights": "missing.pt"}, "does not exist"),
        ({"factory": "trained_factories:narrower_cnn"}, "do not fit the model"),
        ({"factory": "trained_factories:not_exportable"}, "cannot be exported to ONNX"),
        ({"factory": "trained_factories:softmax_cnn"}, "outputs probabilities .*a softmax"),
    ],
)
def test_a_bad_trained_model_is_refused_before_any_study(tmp_path, weights, model, message):
    model = {"weights": str(weights), **model}
    with pytest.raises(SpecError, match=message):
        _optimize(tmp_path, model)
    assert optuna.get_all_study_names(f"sqlite:///{tmp_path}/s.db") == []


def test_a_corrupt_weights_file_is_refused_before_any_study(tmp_path):
    corrupt = tmp_path / "w.pt"
    corrupt.write_bytes(b"\x00" * 64)
    with pytest.raises(SpecError, match="is not a state dict"):
        _optimize(tmp_path, {"factory": FACTORY, "weights": str(corrupt)})
    assert optuna.get_all_study_names(f"sqlite:///{tmp_path}/s.db") == []


def test_width_or_depth_in_a_trained_models_space_is_refused(tmp_path, weights):
    with pytest.raises(SpecError, match=r"sets \['arch.family', 'arch.width', 'arch.depth'"):
        _optimize(
            tmp_path, {"factory": FACTORY, "weights": str(weights)}, search_space="digits-cnn"
        )
    assert optuna.get_all_study_names(f"sqlite:///{tmp_path}/s.db") == []


@pytest.mark.slow
def test_optimize_takes_a_trained_module_and_arrays(tmp_path, weights):
    from trained_factories import DigitsCNN

    model = DigitsCNN()
    model.load_state_dict(torch.load(weights, weights_only=True))
    data = load_dataset("digits", standardize="none")  # the raw pixels it was trained on
    arrays = {"x_train": data.x_train, "y_train": data.y_train}
    arrays |= {"x_test": data.x_test, "y_test": data.y_test}
    result = automl.optimize(
        model=model, dataset=arrays, n_trials=2, name="module",
        storage=f"sqlite:///{tmp_path}/s.db", artifacts_dir=tmp_path / "artifacts",
        progress=False, remeasure=False,
    )  # fmt: skip
    assert result.spec.model.factory == "trained_factories:DigitsCNN"
    trials = result.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert trials[0].user_attrs["baseline"] and trials[0].user_attrs["accuracy_drop"] == 0.0


def test_an_output_layer_by_another_name_is_found_and_recorded(tmp_path):
    from trained_factories import head_named

    data = load_dataset("digits", standardize="none")
    path = tmp_path / "w.pt"
    torch.save(train(head_named(), data, TrainConfig(epochs=2, lr=1e-2)).model.state_dict(), path)
    model = {"factory": "trained_factories:head_named", "weights": str(path)}
    with pytest.raises(SpecError, match=r"has no layer 'fc'.*--output-layer"):
        _optimize(tmp_path, {**model, "output_layer": "fc"})
    result = automl.optimize(
        {"model": model, "n_trials": 1, "name": "head"},
        storage=f"sqlite:///{tmp_path}/s.db", artifacts_dir=tmp_path / "a", progress=False,
        remeasure=False,
    )  # fmt: skip
    (trial,) = result.study.trials
    assert trial.state.name == "COMPLETE" and trial.user_attrs["output_layer"] == "head"
    pruned = prune(head_named(), data, 0.25, TrainConfig(epochs=0), output_layer="head").model
    assert pruned.head.out_features == 10 and pruned.head.in_features == 36


MIXED_SPACE = """
name: trained-mixed
params:
  method: {type: categorical, choices: [fp32, int8-mixed]}
  keep_fp32: {type: fixed, value: 1, when: {method: [int8-mixed]}}
  batch_size: {type: fixed, value: 8}
"""


def test_a_mixed_trial_of_a_trained_model_is_measured_beside_its_fp32_baseline(
    tmp_path, weights, monkeypatch, zygote
):
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parents[1]))  # the factory's module
    space = tmp_path / "space.yaml"
    space.write_text(MIXED_SPACE)
    spec = {"name": "mixed", "search_space": str(space), "n_trials": 2,
            "model": {"factory": FACTORY, "weights": str(weights)}}  # fmt: skip
    run = run_cli_study(tmp_path, spec, [{"method": "int8-mixed", "keep_fp32": 1}], zygote)
    study = optuna.load_study(study_name="mixed", storage=run["storage"])
    baseline, mixed = study.trials
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    assert baseline.params == {"method": "fp32"} and mixed.params["method"] == "int8-mixed"
    assert len(mixed.user_attrs["history"]["layers"]["kept_fp32"]) == 1
    assert mixed.user_attrs["history"]["baseline"]["accuracy"] == baseline.user_attrs["accuracy"]
    assert mixed.user_attrs["quantization_gain"] > 0
