"""No REST body names an absolute path of the server: errors show paths under the data root
relative to it, and any other path by its file name."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from api import create_app
from api.errors import scrub_paths
from automl.storage.factory import open_storage

pytest_plugins = ["api_fixtures"]
FACTORY = "trained_factories:digits_cnn"


def test_the_scan_finds_the_server_paths_and_only_them(tmp_path_factory, tmp_path):
    from api_fixtures import named_paths, server_paths

    folders = server_paths(tmp_path_factory.getbasetemp())
    leaked = f'{{"message": "weights \'{tmp_path}/w.pt\' do not fit", "x": "/tmp/automl-1/m.onnx"}}'
    assert named_paths(leaked, folders) == [f"{tmp_path}/w.pt", "/tmp/automl-1/m.onnx"]
    clean = '{"message": "no study named \'a\'; GET /v1/studies lists them", "weights": "w.pt"}'
    assert named_paths(clean, folders) == []


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        ("weights '{root}/models/w.pt' do not fit", "weights 'models/w.pt' do not fit"),
        ("should be file inside '{root}', but", "should be file inside '<data root>', but"),
        ("Load model from /tmp/automl-check-x1/model.onnx failed:", "Load model from model.onnx failed:"),
        ("cannot write /srv/artifacts/ab12.", "cannot write ab12."),
        ("PosixPath('/srv/my models/a.pt')", "PosixPath('a.pt')"),
        ("no study 'a'; GET /v1/studies lists them", "no study 'a'; GET /v1/studies lists them"),
        ("see '/v1/studies/a/trials'", "see '/v1/studies/a/trials'"),
        ("not found: POST /nope/x", "not found: POST /nope/x"),
        ("ms / sample, 1/2, models/a.pt, ~/a, http://host/a", "ms / sample, 1/2, models/a.pt, ~/a, http://host/a"),
    ],
)  # fmt: skip
def test_messages_show_data_root_paths_relative_and_other_paths_by_name(tmp_path, message, shown):
    root = tmp_path / "data"
    assert scrub_paths(message.format(root=root), root) == shown


def _onnx_model(custom_op: bool = False) -> onnx.ModelProto:
    """A 1x8x8 -> 10 logits graph; with a node of an unknown domain if ``custom_op``."""
    nodes = [
        helper.make_node("Flatten", ["x"], ["flat"]),
        helper.make_node("MatMul", ["flat", "W"], ["y"]),
    ]
    opsets = [helper.make_opsetid("", 17)]
    if custom_op:
        nodes.append(helper.make_node("Evil", ["y"], ["z"], domain="com.evil"))
        opsets.append(helper.make_opsetid("com.evil", 1))
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(np.ones((64, 10), np.float32), "W")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 9
    return model


def _crafted_models(root: Path) -> None:
    """models/custom.onnx (an op ONNX Runtime lacks), outside.onnx (its weights' external data
    lie outside its folder) and models/wrongshape.pt."""
    import torch

    (root / "models").mkdir()
    onnx.save(_onnx_model(custom_op=True), root / "models" / "custom.onnx")
    outside = _onnx_model()
    weights = outside.graph.initializer[0]
    weights.ClearField("raw_data")
    weights.data_location = TensorProto.EXTERNAL
    weights.external_data.add(key="location", value="../outside.bin")
    onnx.save(outside, root / "outside.onnx")
    torch.save({"classifier.weight": torch.zeros(3)}, root / "models" / "wrongshape.pt")


@pytest.fixture
def serve(api_settings, run_api, api_token, tmp_path, monkeypatch):
    """``serve(**settings)``: a live API on SQLite, allowing FACTORY, with the crafted models
    under its data root; yields the client, storage and settings."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))

    @contextlib.contextmanager
    def start(**overrides):
        url = f"sqlite:///{tmp_path / 'studies.db'}"
        settings = api_settings(url, model_factories=[FACTORY], **overrides)
        _crafted_models(settings.data_root)
        storage = open_storage(url, settings)
        with run_api(create_app(settings, storage=storage)) as base:
            auth = {"Authorization": f"Bearer {api_token}"}
            with httpx.Client(base_url=base, headers=auth, timeout=120) as client:
                yield client, storage, settings
        storage.engine.dispose()

    return start


@pytest.mark.parametrize(
    ("weights", "says"),
    [
        ("outside.onnx", "should be file inside '<data root>', but '../outside.bin'"),
        ("models/custom.onnx", "Load model from model.onnx failed"),
    ],
)
def test_a_refused_onnx_model_is_named_without_server_paths(serve, unique_name, weights, says):
    with serve() as (client, _, settings):
        body = {"name": unique_name("paths"), "n_trials": 2, "model": {"weights": weights}}
        response = client.post("/v1/studies", json=body)
    assert response.status_code == 422, response.text
    assert says in response.json()["message"]
    assert str(settings.data_root) not in response.text and "automl-check-" not in response.text


def test_a_study_the_worker_refused_names_its_weights_by_their_path_in_the_data_root(
    serve, unique_name
):
    from automl.fleet.scheduler import work
    from automl.fleet.study_loop import GracefulStop
    from automl.storage.factory import open_artifact_store

    with serve(model_check_timeout_s=0.01) as (client, storage, settings):
        name = unique_name("paths")
        model = {"factory": FACTORY, "weights": "models/wrongshape.pt"}
        response = client.post("/v1/studies", json={"name": name, "n_trials": 2, "model": model})
        assert response.status_code == 201, response.text  # the check is left to the worker
        worker = threading.Thread(
            target=work, args=(storage,), kwargs={
                "artifact_store": open_artifact_store(settings), "settings": settings,
                "stop": GracefulStop(), "exit_when_idle": True, "poll_s": 0.1,
            },
        )  # fmt: skip
        worker.start()
        worker.join(120)
        study = client.get(f"/v1/studies/{name}").json()
    assert study["state"] == "failed"
    assert "weights 'models/wrongshape.pt' do not fit" in study["error"], study["error"]


def test_a_spec_path_outside_the_data_root_is_shown_by_its_name(tmp_path):
    from api.policy import public_spec
    from automl.settings import Settings

    settings = Settings(data_root=tmp_path / "data")
    spec = {
        "dataset": "/srv/cli/wine.npz",
        "search_space": "/home/op/spaces/mine.yaml",
        "model": {"weights": str(tmp_path / "data/m/w.pt")},
    }
    shown = public_spec(spec, settings)
    assert (shown["dataset"], shown["search_space"]) == ("wine.npz", "mine.yaml")
    assert shown["model"]["weights"] == "m/w.pt"
    builtin = public_spec({"dataset": "digits", "search_space": "digits-mlp"}, settings)
    assert (builtin["dataset"], builtin["search_space"]) == ("digits", "digits-mlp")
