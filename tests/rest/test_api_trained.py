"""A trained model's study over the API: allowed factories only, weights under the data root."""

from __future__ import annotations

import contextlib
import re
import shutil
import threading
from pathlib import Path

import httpx
import numpy as np
import optuna
import pytest
import torch

from api import create_app
from automl.storage.factory import open_storage

pytest_plugins = ["api_fixtures"]
# What is checked here is the model check and its policy, not the storage: SQLite only (every
# model check is a child process that imports torch). The other REST modules run on both.
pytestmark = pytest.mark.parametrize("api_storage_url", ["sqlite"], indirect=True)
FACTORY = "trained_factories:digits_cnn"


@pytest.fixture
def serve(api_settings, api_storage_url, run_api, api_token, digits_cnn_weights, monkeypatch):
    """``serve(**settings)``: a live API that allows FACTORY, with its trained weights under
    the data root as models/cnn.pt, random ones as models/random.pt, a pickled module as
    models/module.pt and arrays as models/arrays.npz; yields the client and storage."""
    from trained_factories import digits_cnn

    # The model's check runs in a child process: it imports the factories as a server's would.
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))

    @contextlib.contextmanager
    def start(**overrides):
        settings = api_settings(api_storage_url, model_factories=[FACTORY], **overrides)
        models = settings.data_root / "models"
        models.mkdir()
        shutil.copyfile(digits_cnn_weights, models / "cnn.pt")
        torch.save(digits_cnn().state_dict(), models / "random.pt")
        torch.save(digits_cnn(), models / "module.pt")
        np.savez(models / "arrays.npz", w=np.zeros(3))
        storage = open_storage(api_storage_url, settings)
        with run_api(create_app(settings, storage=storage)) as url:
            auth = {"Authorization": f"Bearer {api_token}"}
            with httpx.Client(base_url=url, headers=auth, timeout=120) as client:
                yield client, storage, settings
        storage.engine.dispose()

    return start


@pytest.fixture
def served(serve):
    """The live API of :func:`serve` with the default settings: ``(client, storage)``."""
    with serve() as (client, storage, _):
        yield client, storage


def _work_until_idle(storage, settings) -> bool:
    """Run a worker on the storage until no study is left to run; whether it stopped."""
    from automl.fleet.scheduler import work
    from automl.fleet.study_loop import GracefulStop
    from automl.storage.factory import open_artifact_store

    worker = threading.Thread(
        target=work, args=(storage,), kwargs={
            "artifact_store": open_artifact_store(settings), "settings": settings,
            "stop": GracefulStop(), "exit_when_idle": True, "poll_s": 0.1,
        },
    )  # fmt: skip
    worker.start()
    worker.join(120)
    return not worker.is_alive()


def _post(client: httpx.Client, name: str, **model: object) -> httpx.Response:
    body = {"name": name, "n_trials": 4, "model": {"weights": "models/cnn.pt", **model}}
    return client.post("/v1/studies", json=body)


def test_a_factory_off_the_allow_list_is_refused(served, unique_name):
    client, storage = served
    name = unique_name("trained")
    response = _post(client, name, factory="os:system")
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "model.factory"
    assert "AUTOML_MODEL_FACTORIES" in response.json()["message"]
    assert FACTORY not in response.json()["message"]  # the allow-list is the operator's
    assert name not in optuna.get_all_study_names(storage)


@pytest.mark.parametrize("weights", ["../cnn.pt", "/etc/passwd", "models/missing.pt"])
def test_weights_must_lie_under_the_data_root(served, unique_name, weights):
    client, storage = served
    name = unique_name("trained")
    response = _post(client, name, factory=FACTORY, weights=weights)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "model.weights"
    assert name not in optuna.get_all_study_names(storage)


def test_an_allowed_model_gets_a_study_whose_first_trial_is_the_baseline(served, unique_name):
    client, storage = served
    name = unique_name("trained")
    response = _post(client, name, factory=FACTORY)
    assert response.status_code == 201, response.text
    spec = response.json()["spec"]
    assert spec["model"]["weights"] == "models/cnn.pt"  # as the client gave it
    assert spec["search_space"] == "trained-model"
    assert [o["metric"] for o in spec["objectives"]] == ["accuracy_drop", "speedup"]
    waiting = optuna.load_study(study_name=name, storage=storage).trials
    assert len(waiting) == 1 and waiting[0].user_attrs == {"baseline": True}
    assert waiting[0].state == optuna.trial.TrialState.WAITING


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ("models/module.pt", r"weights file 'models/module.pt' is not a state dict .*weights_only"),
        ("models/arrays.npz", r"weights file 'models/arrays.npz' is not a state dict"),
        ("models/random.pt", r"not clearly above chance for 10 classes .*as given"),
    ],
)
def test_a_model_that_cannot_serve_is_refused_before_the_201(served, unique_name, weights, message):
    client, storage = served
    name = unique_name("trained")
    response = _post(client, name, factory=FACTORY, weights=weights)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "model"
    assert re.search(message, response.json()["message"]), response.json()["message"]
    assert name not in optuna.get_all_study_names(storage)


def test_a_check_that_outlasts_the_request_fails_the_study_at_the_worker(serve, unique_name):
    with serve(model_check_timeout_s=0.01) as (client, storage, settings):
        name = unique_name("trained")
        response = _post(client, name, factory=FACTORY, weights="models/random.pt")
        assert response.status_code == 201, response.text
        assert _work_until_idle(storage, settings)
        study = client.get(f"/v1/studies/{name}").json()
        assert study["state"] == "failed" and study["waiting_reason"] is None
        assert "not clearly above chance" in study["error"]
        assert optuna.load_study(study_name=name, storage=storage).trials[0].state.name == (
            "WAITING"  # the baseline never ran
        )


def test_an_onnx_model_needs_no_factory(serve, unique_name, digits_cnn_weights):
    from trained_factories import digits_cnn

    model = digits_cnn()
    model.load_state_dict(torch.load(digits_cnn_weights, weights_only=True))
    with serve() as (client, storage, settings):
        path = settings.data_root / "models" / "cnn.onnx"
        torch.onnx.export(model.eval(), (torch.zeros(1, 1, 8, 8),), str(path), dynamo=False)
        name = unique_name("onnx")
        response = client.post(
            "/v1/studies",
            json={"name": name, "n_trials": 2, "model": {"weights": "models/cnn.onnx"}},
        )
        assert response.status_code == 201, response.text
        spec = response.json()["spec"]
        assert spec["search_space"] == "onnx-model" and spec["model"]["factory"] is None
        assert spec["model"]["weights"] == "models/cnn.onnx"  # as the client gave it
        assert optuna.load_study(study_name=name, storage=storage).trials[0].user_attrs == {
            "baseline": True
        }


def test_a_link_swapped_after_the_201_is_not_followed_by_the_worker(serve, unique_name, tmp_path):
    with serve() as (client, storage, settings):
        link = settings.data_root / "models" / "link.pt"
        link.symlink_to(settings.data_root / "models" / "cnn.pt")
        name = unique_name("trained")
        response = _post(client, name, factory=FACTORY, weights="models/link.pt")
        assert response.status_code == 201, response.text
        outside = tmp_path / "outside.pt"  # e.g. a file the server must never read for them
        outside.write_bytes((settings.data_root / "models" / "cnn.pt").read_bytes())
        link.unlink()
        link.symlink_to(outside)
        _work_until_idle(storage, settings)
        study = client.get(f"/v1/studies/{name}").json()
        assert study["state"] == "failed"
        assert (
            "model.weights of study" in study["error"] and "outside the data root" in study["error"]
        )
