"""Exports name the runtime a trial was measured on: its sidecar, its ONNX metadata and, for a
trial measured on OpenVINO, a Triton config for Triton's OpenVINO backend."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import onnx
import openvino as ov
import pytest
from conftest import run_cli_study
from optuna.trial import TrialState
from test_triton import model_config

from automl.service.exports import METADATA_PREFIX, export_model, measured_runtime

# Its module fixture runs a study: one process runs all its tests, so it runs once.
pytestmark = pytest.mark.xdist_group("test_export_runtimes")

NAME = "runtimes"
SPACE = """\
name: tiny-runtimes
params:
  arch.family: {type: fixed, value: mlp}
  arch.width: {type: fixed, value: 8}
  arch.depth: {type: fixed, value: 1}
  pruning_ratio: {type: fixed, value: 0.0}
  finetune_epochs: {type: fixed, value: 0}
  method: {type: categorical, choices: [fp32, int8-static]}
  runtime: {type: categorical, choices: [openvino, ort-cpu]}
  batch_size: {type: fixed, value: 8}
  train.epochs: {type: fixed, value: 1}
"""


@pytest.fixture(scope="module")
def study_run(tmp_path_factory: pytest.TempPathFactory, zygote) -> dict:
    root = tmp_path_factory.mktemp("export-runtimes")
    (root / "space.yaml").write_text(SPACE)
    spec = {"name": NAME, "search_space": str(root / "space.yaml"), "n_trials": 2}
    enqueued = [
        {"runtime": "openvino", "method": "int8-static"},
        {"runtime": "ort-cpu", "method": "fp32"},
    ]
    run = run_cli_study(root, spec, enqueued, zygote)
    trials = run["study"].get_trials(states=[TrialState.COMPLETE])
    return {**run, "trials": {t.params["runtime"]: t for t in trials}}


def _export(study_run: dict, runtime: str) -> tuple[Path, dict]:
    trial = study_run["trials"][runtime]
    path = study_run["root"] / runtime / "model.onnx"
    return path, export_model(NAME, study_run["storage"], study_run["store"], trial.number, path)


def test_an_openvino_trial_exports_its_runtime_version_and_settings(study_run: dict) -> None:
    path, sidecar = _export(study_run, "openvino")
    env = study_run["trials"]["openvino"].user_attrs["env"]
    assert sidecar["runtime"] == {
        "name": "openvino",
        "version": version("openvino"),  # the release; env has the build
        "settings": env["openvino_config"],
    }
    settings = sidecar["runtime"]["settings"]
    assert (settings["INFERENCE_NUM_THREADS"], settings["batch"]) == ("1", "8")  # as measured
    assert json.loads(path.with_suffix(".json").read_text())["runtime"] == sidecar["runtime"]
    props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    assert json.loads(props[METADATA_PREFIX + "runtime"]) == sidecar["runtime"]


def test_an_onnx_runtime_trial_exports_ort_cpu_with_its_threads(study_run: dict) -> None:
    import onnxruntime as ort

    path, sidecar = _export(study_run, "ort-cpu")
    assert sidecar["runtime"] == {
        "name": "ort-cpu",
        "version": ort.__version__,
        "settings": {"intra_op_threads": 1, "graph_optimization": "all"},
    }
    props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    assert json.loads(props[METADATA_PREFIX + "runtime"])["name"] == "ort-cpu"


def test_a_trial_recorded_before_deployments_names_its_backend_or_ort_cpu(
    study_run: dict,
) -> None:
    attrs = dict(study_run["trials"]["openvino"].user_attrs)
    history = {k: v for k, v in attrs["history"].items() if k != "deployment"}
    older = {**attrs, "history": history}
    assert measured_runtime(older)["name"] == "openvino"  # from env.backend
    env = {k: v for k, v in attrs["env"].items() if k not in ("backend", "graph_optimization")}
    oldest = {**older, "env": env, "candidate": {"graph_optimization": "basic"}}
    assert measured_runtime(oldest) == {
        "name": "ort-cpu",
        "version": env["onnxruntime"],
        "settings": {"intra_op_threads": 1, "graph_optimization": "basic"},
    }


@pytest.mark.e2e  # a process of its own
def test_the_triton_export_of_an_openvino_trial_is_for_the_openvino_backend(
    study_run: dict, zygote
) -> None:
    number = study_run["trials"]["openvino"].number
    args = ["study", "export", NAME, "--trial", str(number), "--format", "triton", "-o", "repo"]
    done = zygote.run(args, cwd=study_run["root"], env=study_run["env"], timeout=300)
    assert done.returncode == 0, done.stderr
    entry = study_run["root"] / "repo" / NAME
    config = model_config((entry / "config.pbtxt").read_text())
    assert (config.backend, config.default_model_filename) == ("openvino", "model.onnx")
    assert (entry / "1" / config.default_model_filename).is_file()
    assert config.max_batch_size == 8 and config.instance_group[0].count == 1
    parameters = {key: p.string_value for key, p in config.parameters.items()}
    assert parameters.pop("ENABLE_BATCH_PADDING") == "YES"
    # The backend hands these to OpenVINO: compiled so, the model runs as the trial measured.
    compiled = ov.Core().compile_model(str(entry / "1" / "model.onnx"), "CPU", parameters)
    measured = study_run["trials"]["openvino"].user_attrs["env"]["openvino_config"]
    assert {k: str(compiled.get_property(k)) for k in parameters} == {
        k: measured[k] for k in parameters
    }
