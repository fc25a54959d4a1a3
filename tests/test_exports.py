"""Exported models run from their sidecar alone and reproduce the stored accuracy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import optuna
import pytest
from conftest import run_cli_study
from optuna.trial import TrialState
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from automl.data import Dataset
from automl.errors import SpecError
from automl.exports import choose_trial, export_model
from automl.spec import METRICS
from automl.studies import pareto_front

NAME = "ex"
ORT_TYPES = {"float32": "tensor(float)", "float16": "tensor(float16)"}
# One trial per precision; int8 dynamic at batch 32, where its scales depend on the batch.
ENQUEUED = [
    {"bits": 32, "batch_size": 8},
    {"bits": 16, "batch_size": 1},
    {"bits": 8, "int8_mode": "static", "batch_size": 128},
    {"bits": 8, "int8_mode": "dynamic", "batch_size": 32},
]


@pytest.fixture(scope="module")
def study_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    enqueued = [{"arch.width": 32, "arch.depth": 1, "pruning_ratio": 0.0, **p} for p in ENQUEUED]
    spec = {"name": NAME, "search_space": "digits-mlp", "n_trials": 4}
    run = run_cli_study(tmp_path_factory.mktemp("exports"), spec, enqueued)
    return {**run, "trials": run["study"].get_trials(states=[TrialState.COMPLETE])}


@pytest.fixture(scope="module")
def exported(study_run: dict) -> list[tuple[optuna.trial.FrozenTrial, Path, dict]]:
    out = []
    for trial in study_run["trials"]:
        path = study_run["root"] / f"trial-{trial.number}" / "model.onnx"
        sidecar = export_model(NAME, study_run["storage"], study_run["store"], trial.number, path)
        out.append((trial, path, sidecar))
    return out


def test_every_precision_ran(study_run: dict) -> None:
    assert sorted(t.params["bits"] for t in study_run["trials"]) == [8, 8, 16, 32]


def test_sidecar(exported: list) -> None:
    for trial, path, sidecar in exported:
        assert json.loads(path.with_name("model.json").read_text()) == sidecar
        assert (sidecar["study"], sidecar["trial"]) == (NAME, trial.number)
        assert (sidecar["target"], sidecar["dataset"]) == ("cpu", "digits")
        assert sidecar["params"] == trial.params
        assert sidecar["metrics"] == {k: trial.user_attrs[k] for k in METRICS}
        assert sidecar["env"] == trial.user_attrs["env"]
        assert {"onnxruntime", "provider", "cpu_model", "intra_op_threads"} <= sidecar["env"].keys()
        (model_input,), (model_output,) = sidecar["inputs"], sidecar["outputs"]
        assert (model_input["name"], model_input["shape"]) == ("input", ["batch", 1, 8, 8])
        assert (model_output["name"], model_output["shape"]) == ("logits", ["batch", 10])
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        actual = [*session.get_inputs(), *session.get_outputs()]
        declared = [
            (v["name"], v["shape"], ORT_TYPES[v["dtype"]]) for v in (model_input, model_output)
        ]
        assert declared == [(v.name, v.shape, v.type) for v in actual]
        standardize = sidecar["preprocessing"]["standardize"]
        assert standardize["std"] > 0 and isinstance(standardize["mean"], float)


def _raw_test_split(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The test split of the raw 8×8 digits, as a user outside automl would make it."""
    digits = load_digits()
    images = digits.images.astype(np.float32)[:, None, :, :]  # (N, 8, 8) -> (N, 1, 8, 8)
    _, x_test, _, y_test = train_test_split(
        images, digits.target, test_size=0.2, random_state=seed, stratify=digits.target
    )
    return x_test, y_test


def test_sidecar_preprocessing_gives_the_test_split(exported: list, digits: Dataset) -> None:
    x_raw, y = _raw_test_split()
    for _, _, sidecar in exported:
        standardize = sidecar["preprocessing"]["standardize"]
        x = (x_raw - standardize["mean"]) / standardize["std"]
        np.testing.assert_array_equal(x, digits.x_test)
        np.testing.assert_array_equal(y, digits.y_test)


def test_fresh_session_reproduces_stored_accuracy(exported: list) -> None:
    x_raw, y = _raw_test_split()
    for trial, path, sidecar in exported:
        options = ort.SessionOptions()
        options.intra_op_num_threads = sidecar["env"]["intra_op_threads"]
        session = ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        (model_input,) = sidecar["inputs"]
        assert session.get_inputs()[0].name == model_input["name"]
        standardize = sidecar["preprocessing"]["standardize"]
        x = ((x_raw - standardize["mean"]) / standardize["std"]).astype(model_input["dtype"])
        batch = sidecar["candidate"]["batch_size"]  # the batch the accuracy was measured at
        predicted = np.concatenate(
            [
                session.run(None, {model_input["name"]: x[i : i + batch]})[0].argmax(axis=1)
                for i in range(0, len(x), batch)
            ]
        )
        accuracy = float(np.mean(predicted == y))
        assert accuracy == sidecar["metrics"]["accuracy"] == trial.user_attrs["accuracy"], (
            f"trial {trial.number} ({trial.params})"
        )


def test_choose_trial_picks_the_most_accurate_front_trial(study_run: dict) -> None:
    front = pareto_front(NAME, study_run["storage"])
    best = max(front, key=lambda r: r["metrics"]["accuracy"])
    assert choose_trial(NAME, study_run["storage"], "accuracy") == best["number"]


def test_a_malformed_budget_is_a_spec_error(study_run: dict) -> None:
    with pytest.raises(SpecError, match="invalid budget: constraint 'latency < 2' must look like"):
        choose_trial(NAME, study_run["storage"], "accuracy", "latency < 2")
