"""`automl.optimize` and `automl.load`, checked against plain `optuna.load_study`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import optuna
import pytest
import yaml
from disks import tmpfs

import automl
from automl.errors import DataError, SpecError, StorageUnavailable
from automl.inputs import synthetic
from automl.python_api import _status, save_arrays
from automl.search.objectives import Objective
from automl.search.spec import StudySpec
from automl.service.studies import StudyNotFound
from automl.study_result import StudyResult

pytestmark = pytest.mark.slow

SPEC = {
    "name": "api",
    "search_space": "digits-mlp",
    "n_trials": 3,
    "constraints": ["size_mb <= 1"],  # every digits-mlp model meets it: the front is never empty
}


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict:
    """A 3-trial study run by `automl.optimize` (front re-measured at the end)."""
    root = tmp_path_factory.mktemp("python-api")
    where = {"storage": f"sqlite:///{root / 'automl.db'}", "artifacts_dir": root / "artifacts"}
    result = automl.optimize(**SPEC, **where, progress=False)
    return {"result": result, "root": root, **where}


def test_optimize_runs_the_study_and_its_front_is_optunas(ran) -> None:
    result = ran["result"]
    study = optuna.load_study(study_name="api", storage=ran["storage"])
    best = sorted(study.best_trials, key=lambda t: t.number)
    front = result.front
    assert result.ended == "done"
    assert len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) == 3
    assert [row["number"] for row in front] == [t.number for t in best]
    assert front
    for row, trial in zip(front, best, strict=True):
        assert list(row["values"].values()) == trial.values
        assert row["params"] == trial.params
        assert row["user_attrs"] == trial.user_attrs
        assert {"accuracy", "test_accuracy"} <= set(row["metrics"])
    assert result.study.study_name == "api"
    assert result.spec.search_space == "digits-mlp"
    assert result.spec.metric_names == list(front[0]["values"])
    assert set(study.user_attrs["remeasured_front"]) == {str(row["number"]) for row in front}


def test_best_is_the_front_row_best_on_the_metric(ran) -> None:
    result = ran["result"]
    front = result.front
    best = result.best("accuracy")
    assert best in front
    assert best["metrics"]["accuracy"] == max(row["metrics"]["accuracy"] for row in front)
    fastest = result.best("latency_per_sample_ms", budget="latency_p99_ms <= 1000")
    assert fastest in front
    assert fastest["metrics"]["latency_per_sample_ms"] == min(
        row["metrics"]["latency_per_sample_ms"] for row in front
    )


def test_export_writes_the_model_and_its_sidecar(ran, tmp_path) -> None:
    result = ran["result"]
    row = result.front[-1]
    sidecar = result.export(row, tmp_path / "model.onnx")
    assert sidecar["trial"] == row["number"]
    assert (tmp_path / "model.onnx").is_file()
    assert json.loads((tmp_path / "model.json").read_text()) == sidecar
    assert result.export(row["number"], tmp_path / "again.onnx")["sha256"] == sidecar["sha256"]


def test_report_is_written_with_the_front_models_beside_it(ran, tmp_path) -> None:
    result = ran["result"]
    path = result.report(tmp_path / "report" / "index.html")
    assert path == tmp_path / "report" / "index.html"
    assert "api" in path.read_text()
    for row in result.front:
        assert (tmp_path / "report" / "models" / f"trial-{row['number']}.onnx").is_file()


def test_load_reopens_the_study_with_the_same_front(ran) -> None:
    loaded = automl.load("api", storage=ran["storage"], artifacts_dir=ran["artifacts_dir"])
    assert loaded.front == ran["result"].front
    assert loaded.spec == ran["result"].spec
    assert loaded.ended is None
    assert loaded.best("accuracy") == ran["result"].best("accuracy")
    # without artifacts_dir, the models are found beside the storage's file (root/artifacts)
    beside = automl.load("api", storage=ran["storage"])
    beside.export(loaded.front[0]["number"], ran["root"] / "beside" / "m.onnx")
    assert (ran["root"] / "beside" / "m.json").is_file()


def test_a_default_name_tells_the_dataset_apart() -> None:
    from automl.python_api import _study_spec

    wine = {"search_space": "digits-mlp", "dataset": "/d/wine.npz"}
    assert _study_spec(None, wine, storage=None).name == "digits-mlp-wine-cpu"
    spec = StudySpec(search_space="digits-mlp")  # its derived name follows the dataset given
    assert _study_spec(spec, {"dataset": "/d/wine.npz"}, storage=None).name == "digits-mlp-wine-cpu"


def test_load_names_what_is_missing(ran) -> None:
    with pytest.raises(StudyNotFound):
        automl.load("no-such-study", storage=ran["storage"])
    with pytest.raises(StorageUnavailable):
        automl.load("api", storage=f"sqlite:///{ran['root'] / 'missing.db'}")


@pytest.mark.parametrize("form", ["dict", "studyspec", "yaml"])
def test_the_same_spec_in_any_form_resumes_the_done_study(ran, form) -> None:
    spec = {"dict": SPEC, "studyspec": StudySpec(**SPEC)}.get(form)
    if form == "yaml":
        spec = ran["root"] / "spec.yaml"
        spec.write_text(yaml.safe_dump(SPEC))
    where = {"storage": ran["storage"], "artifacts_dir": ran["artifacts_dir"]}
    again = automl.optimize(spec, **where, progress=False, remeasure=False)
    assert again.ended == "done"
    assert again.front == ran["result"].front


def test_another_spec_under_the_same_name_runs_nothing(ran) -> None:
    where = {"storage": ran["storage"], "artifacts_dir": ran["artifacts_dir"]}
    with pytest.raises(SpecError, match="different spec"):
        automl.optimize(SPEC, search_space="digits-cnn", **where, progress=False)
    study = optuna.load_study(study_name="api", storage=ran["storage"])
    assert len(study.trials) == 3


def test_arrays_are_a_dataset_and_a_name_alone_resumes(tmp_path, digits) -> None:
    arrays = {
        "x_train": digits.x_train, "y_train": digits.y_train,
        "x_test": digits.x_test, "y_test": digits.y_test,
    }  # fmt: skip
    where = {"storage": f"sqlite:///{tmp_path / 'a.db'}", "artifacts_dir": tmp_path / "art"}
    first = automl.optimize(
        name="arrays", search_space="digits-mlp", dataset=arrays, n_trials=1, constraints=[],
        **where, progress=False, remeasure=False,
    )  # fmt: skip
    path = save_arrays(arrays, tmp_path / "art" / "datasets")
    assert first.spec.dataset == str(path)
    assert first.spec.dataset_name == "dataset"  # as the user gave it: never the hashed file
    assert first.study.user_attrs["dataset"] == "dataset"
    resumed = automl.optimize(name="arrays", n_trials=2, **where, progress=False, remeasure=False)
    assert resumed.spec.dataset == str(path)
    assert resumed.spec.n_trials == 2
    assert [t.state.name for t in resumed.study.trials] == ["COMPLETE", "COMPLETE"]


def test_token_arrays_with_their_vocab_size_are_a_dataset(tmp_path) -> None:
    arrays = synthetic.tokens(n_train=120, n_test=40, length=8, vocab_size=16)
    assert np.ndim(arrays["vocab_size"]) == 0
    with np.load(save_arrays(arrays, tmp_path)) as saved:
        assert saved["vocab_size"].shape == ()  # a scalar stays one
    result = automl.optimize(
        search_space="text-transformer", dataset=arrays, n_trials=1, constraints=[],
        storage=f"sqlite:///{tmp_path / 't.db'}", artifacts_dir=tmp_path / "art",
        progress=False, remeasure=False,
    )  # fmt: skip
    assert [t.state.name for t in result.study.trials] == ["COMPLETE"]


def test_errors_about_arrays_name_them_as_given(tmp_path) -> None:
    x = np.zeros((20, 3), np.float32)
    x[4, 1] = np.nan
    arrays = {
        "x_train": x,
        "y_train": np.arange(20) % 2,
        "x_test": x[:4],
        "y_test": np.arange(4) % 2,
    }
    with pytest.raises(DataError) as refused:
        automl.optimize(
            search_space="digits-mlp", dataset=arrays, n_trials=1,
            storage=f"sqlite:///{tmp_path / 'e.db'}", artifacts_dir=tmp_path / "art",
            progress=False,
        )  # fmt: skip
    assert "x_train of 'dataset' has 1 values that are NaN" in str(refused.value)
    assert "datasets/" not in str(refused.value) and ".npz" not in str(refused.value)


def test_a_read_only_artifacts_folder_is_refused_before_anything_is_written(tmp_path) -> None:
    folder = tmp_path / "art"
    with tmpfs(folder, size_kb=64, read_only=True), pytest.raises(SpecError) as refused:
        automl.optimize(
            search_space="digits-mlp", dataset={"x_train": np.zeros((20, 3), np.float32)},
            n_trials=1, storage=f"sqlite:///{tmp_path / 'e.db'}", artifacts_dir=folder,
            progress=False,
        )  # fmt: skip
    assert str(refused.value) == (
        f"artifacts folder {str(folder)!r} cannot be written: Read-only file system; give a "
        "writable artifacts_dir= (or AUTOML_ARTIFACTS_DIR)"
    )
    assert not (tmp_path / "e.db").exists()  # no storage, no study


@pytest.mark.slow
def test_tabular_features_of_many_scales_reach_a_linear_models_accuracy(tmp_path) -> None:
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    bunch = load_breast_cancer()
    x_train, x_test, y_train, y_test = train_test_split(
        bunch.data, bunch.target, test_size=0.25, random_state=0, stratify=bunch.target
    )
    result = automl.optimize(
        search_space="digits-mlp", n_trials=8, constraints=[],
        dataset={"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test},
        storage=f"sqlite:///{tmp_path / 'b.db'}", artifacts_dir=tmp_path / "art",
        progress=False, remeasure=False,
    )  # fmt: skip
    best = max(result.study.best_trials, key=lambda t: t.user_attrs["accuracy"])
    assert best.user_attrs["test_accuracy"] >= 0.94  # scalar standardisation topped at 0.90
    standardize = best.user_attrs["preprocessing"]["standardize"]
    assert standardize["mode"] == "per_feature" and len(standardize["mean"]) == 30


def test_saved_arrays_are_named_by_content(tmp_path) -> None:
    a = {"x_train": np.zeros((4, 2), np.float32), "y_train": np.arange(4)}
    b = {"x_train": np.ones((4, 2), np.float32), "y_train": np.arange(4)}
    assert save_arrays(a, tmp_path) == save_arrays(dict(a), tmp_path)
    assert save_arrays(a, tmp_path) != save_arrays(b, tmp_path)
    with np.load(save_arrays(a, tmp_path)) as saved:
        assert (saved["x_train"] == a["x_train"]).all()
    assert [p.suffix for p in tmp_path.iterdir()] == [".npz", ".npz"]


def test_arrays_of_objects_are_refused(tmp_path) -> None:
    with pytest.raises(SpecError, match="x_train"):
        save_arrays({"x_train": np.array([{}, None], dtype=object)}, tmp_path)


def test_import_automl_is_light_and_exports_the_api() -> None:
    code = (
        "import sys, automl; heavy = [m for m in ('torch', 'optuna', 'automl.fleet.study_loop') "
        "if m in sys.modules]; print(heavy, dir(automl))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] ['StudyResult', '__version__', 'load', 'optimize']"
    assert automl.StudyResult is StudyResult
    with pytest.raises(AttributeError, match="no_such_name"):
        automl.no_such_name  # noqa: B018


def test_ctrl_c_stops_after_the_running_trial_and_returns_the_result(tmp_path, zygote) -> None:
    storage = f"sqlite:///{tmp_path / 'c.db'}"
    code = (
        "import os; print(os.getpid(), flush=True); "
        "import automl; r = automl.optimize(name='c', search_space='digits-mlp', n_trials=100, "
        f"constraints=[], storage={storage!r}, artifacts_dir='art'); "
        "print(r.ended, len(r.study.trials))"
    )
    # Forked from the zygote: the Ctrl-C lands on a trial, not on imports. Its client passes
    # SIGINT on; a test that fails SIGKILLs the command by its own pid.
    process = zygote.popen_python(
        ["-c", code], cwd=tmp_path, env=dict(os.environ), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    pid = int(process.stdout.readline())
    try:
        while not _a_model_is_stored(tmp_path / "art"):
            assert process.poll() is None, process.communicate()
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        process.kill()
        raise
    assert process.returncode == 0, err
    ended, trials = out.split()
    assert ended == "interrupted"
    assert 1 <= int(trials) < 100
    assert "automl.optimize(name='c') resumes it" in err


def _a_model_is_stored(artifacts: Path) -> bool:
    """Whether a trial has uploaded its model (files at the top; the stage cache below)."""
    return artifacts.is_dir() and any(path.is_file() for path in artifacts.iterdir())


def test_optimize_logs_one_line_per_trial_and_keeps_optuna_quiet(tmp_path, capfd) -> None:
    automl.optimize(
        search_space="digits-mlp", n_trials=2, name="quiet", constraints=[],
        storage=f"sqlite:///{tmp_path / 'q.db'}", artifacts_dir=tmp_path / "art", remeasure=False,
    )  # fmt: skip
    err = capfd.readouterr().err
    assert "[I " not in err  # Optuna's INFO lines repeat each trial's params
    lines = [line for line in err.splitlines() if line.startswith("quiet: ")]
    assert [line.split()[1] for line in lines] == ["1/2", "2/2"], err


def test_the_bar_counts_the_front_as_study_pareto_shows_it_a_tie_within_noise_left_out(tmp_path):
    study = optuna.create_study(
        storage=f"sqlite:///{tmp_path}/s.db", directions=["maximize", "minimize"]
    )
    for accuracy, latency in ((1.00, 0.02290), (0.95, 0.02289)):  # within 5 %: one latency
        attrs = {"accuracy": accuracy, "latency": {"ci_rel": 0.05}}
        study.add_trial(optuna.trial.create_trial(values=[accuracy, latency], user_attrs=attrs))
    objectives = [Objective(metric="accuracy"), Objective(metric="latency_per_sample_ms")]
    assert len(study.best_trials) == 2  # Optuna's front keeps the tie
    assert _status(study, objectives) == (2, "failed 0  front 1  best acc 1.000")
