"""A trained model's study over the API: allowed factories only, weights under the data root."""

from __future__ import annotations

import shutil

import httpx
import optuna
import pytest

from api import create_app
from automl.storage.factory import open_storage

pytest_plugins = ["api_fixtures"]
FACTORY = "trained_factories:digits_cnn"


@pytest.fixture
def served(api_settings, api_storage_url, run_api, api_token, digits_cnn_weights):
    """A live API that allows FACTORY, with its trained weights under the data root."""
    settings = api_settings(api_storage_url, model_factories=[FACTORY])
    (settings.data_root / "models").mkdir()
    shutil.copyfile(digits_cnn_weights, settings.data_root / "models" / "cnn.pt")
    storage = open_storage(api_storage_url, settings)
    with run_api(create_app(settings, storage=storage)) as url:
        auth = {"Authorization": f"Bearer {api_token}"}
        with httpx.Client(base_url=url, headers=auth) as client:
            yield client, storage
    storage.engine.dispose()


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
