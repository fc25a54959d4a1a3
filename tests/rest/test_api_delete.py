from __future__ import annotations

import httpx
import optuna
import pytest

pytest_plugins = ["api_fixtures"]


@pytest.fixture
def study_with_a_model(submit_spec, api_server, unique_name):
    """A submitted study (its Idempotency-Key given) with one COMPLETE trial and its model;
    returns its name and the model's file."""
    name = unique_name("del")
    created = submit_spec(name=name, headers={"Idempotency-Key": f"key-{name}"})
    assert created.status_code == 201, created.text
    model = api_server.settings.artifacts_dir / f"model-of-{name}"
    model.write_bytes(b"onnx")
    study = optuna.load_study(study_name=name, storage=api_server.storage)
    trial = study.ask()
    trial.set_user_attr("artifact_id", model.name)
    study.tell(trial, [0.9, 0.02])
    return name, model


def test_delete_answers_204_and_the_study_and_its_model_are_gone(
    api_client, submit_spec, study_with_a_model
):
    name, model = study_with_a_model
    assert api_client.get(f"/v1/studies/{name}/trials").json()["total"] == 1  # now cached

    deleted = api_client.delete(f"/v1/studies/{name}")

    assert (deleted.status_code, deleted.content) == (204, b"")
    assert not model.exists()
    for path in ("/trials", "/pareto", ""):  # the trials first: the cache is fresh
        gone = api_client.get(f"/v1/studies/{name}{path}")
        assert (gone.status_code, gone.json()["code"]) == (404, "study_not_found")
    again = api_client.delete(f"/v1/studies/{name}")
    assert (again.status_code, again.json()["code"]) == (404, "study_not_found")
    # The request that created it creates it anew, with no trials of the old one.
    resubmitted = submit_spec(name=name, headers={"Idempotency-Key": f"key-{name}"})
    assert resubmitted.status_code == 201, resubmitted.text
    assert api_client.get(f"/v1/studies/{name}/trials").json()["total"] == 0


def test_a_study_with_running_trials_is_409_until_it_is_stopped_and_they_finish(
    api_client, api_server, study_with_a_model
):
    name, model = study_with_a_model
    study = optuna.load_study(study_name=name, storage=api_server.storage)
    running = study.ask()

    refused = api_client.delete(f"/v1/studies/{name}")

    assert (refused.status_code, refused.json()["code"]) == (409, "study_running"), refused.text
    assert f"POST /v1/studies/{name}/stop" in refused.json()["message"]
    assert model.exists() and api_client.get(f"/v1/studies/{name}").status_code == 200
    assert api_client.post(f"/v1/studies/{name}/stop").status_code == 202
    study.tell(running, [0.9, 0.03])
    assert api_client.delete(f"/v1/studies/{name}").status_code == 204


def test_delete_needs_a_token(api_server, study_with_a_model):
    name, model = study_with_a_model
    response = httpx.delete(f"{api_server.url}/v1/studies/{name}")
    assert response.status_code == 401 and model.exists()
