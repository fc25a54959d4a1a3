from __future__ import annotations

import numpy as np
import optuna
import pytest

from automl.records import SPEC_ATTR, STOP_ATTR, front_columns
from automl.search.spec import parse_spec
from automl.storage.workers import WorkerBeacon

pytest_plugins = ["api_fixtures"]


def test_submit_returns_201_and_the_study_resource(submit_spec, api_client, unique_name):
    name = unique_name("sub")
    response = submit_spec(name=name)
    assert response.status_code == 201
    assert response.headers["location"] == f"/v1/studies/{name}"
    body = response.json()
    assert body["name"] == name
    assert body["state"] == "queued"
    assert body["spec"]["search_space"] == "digits-mlp"
    assert body["counts"]["COMPLETE"] == 0
    assert body["waiting_reason"].startswith("no live worker serves target 'cpu'")
    assert api_client.get(f"/v1/studies/{name}").json() == body


def test_idempotency_key_returns_the_same_study(submit_spec, unique_name):
    key = unique_name("key")
    first = submit_spec(headers={"Idempotency-Key": key})
    again = submit_spec(headers={"Idempotency-Key": key})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["name"] == first.json()["name"]
    changed = submit_spec(headers={"Idempotency-Key": key}, seed=7)
    assert changed.status_code == 422
    assert changed.json()["code"] == "idempotency_key_reused"


def test_without_a_key_each_submission_is_a_new_study_and_names_conflict(submit_spec, unique_name):
    first, second = submit_spec(), submit_spec()
    assert first.status_code == second.status_code == 201
    assert first.json()["name"] != second.json()["name"]
    name = unique_name("taken")
    assert submit_spec(name=name).status_code == 201
    conflict = submit_spec(name=name)
    assert conflict.status_code == 409
    assert name in conflict.json()["message"]


def test_list_is_paginated(submit_spec, api_client):
    for _ in range(3):
        submit_spec()
    total = api_client.get("/v1/studies", params={"limit": 1}).json()["total"]
    assert total >= 3
    pages = [api_client.get("/v1/studies", params={"offset": i, "limit": 2}).json() for i in (0, 2)]
    assert [len(p["items"]) for p in pages] == [2, min(2, total - 2)]
    names = [s["name"] for p in pages for s in p["items"]]
    assert len(set(names)) == len(names)
    assert pages[0]["offset"] == 0 and pages[0]["limit"] == 2


def test_absent_target_stays_queued_and_says_why(submit_spec):
    body = submit_spec(target="a100", search_space="digits-gpu").json()
    assert body["state"] == "queued"
    assert "no live worker serves target 'a100'" in body["waiting_reason"]
    assert "automl worker --target a100" in body["waiting_reason"]


def test_why_a_study_waits_comes_from_the_live_workers_not_the_api_host(
    submit_spec, api_client, api_server
):
    """An A100 worker polling the storage: the API on this CPU host says the study waits for it."""
    name = submit_spec(target="a100", search_space="digits-gpu").json()["name"]
    interval = api_server.settings.heartbeat_interval_s
    with WorkerBeacon(api_server.storage, {"a100"}, interval):
        body = api_client.get(f"/v1/studies/{name}").json()
        assert body["waiting_reason"] == "waiting for a free worker with target 'a100'"
    body = api_client.get(f"/v1/studies/{name}").json()  # the worker has gone
    assert body["waiting_reason"].startswith("no live worker serves target 'a100'")


def test_stop_marks_the_study_stopped(submit_spec, api_client, api_server):
    name = submit_spec().json()["name"]
    response = api_client.post(f"/v1/studies/{name}/stop")
    assert response.status_code == 202
    assert response.json()["state"] == "stopped"
    storage = api_server.storage
    assert storage.get_study_user_attrs(storage.get_study_id_from_name(name))[STOP_ATTR] is True


def test_pareto_lists_the_feasible_non_dominated_trials(
    submit_spec, api_client, api_server, synthetic_trial
):
    name = submit_spec(n_trials=10).json()["name"]
    study = optuna.load_study(study_name=name, storage=api_server.storage)
    rows = [(0.90, 1.0), (0.95, 2.0), (0.93, 2.5), (0.99, 2.4), (0.999, 9.0)]
    study.add_trials([synthetic_trial(i, acc, lat) for i, (acc, lat) in enumerate(rows)])
    front = api_client.get(f"/v1/studies/{name}/pareto").json()
    assert front["objectives"] == [
        {"metric": "accuracy", "direction": "maximize"},
        {"metric": "latency_per_sample_ms", "direction": "minimize"},
    ]
    # trial 2 is dominated by trials 1 and 3; trial 4 is infeasible (p99 18 ms > 5 ms)
    assert [t["number"] for t in front["trials"]] == [0, 1, 3]
    assert front["trials"][1]["values"] == {"accuracy": 0.95, "latency_per_sample_ms": 2.0}
    assert front["trials"][0]["model_url"] is None  # synthetic trials have no model
    # the columns of the CLI's table and the report, in their order
    assert [(c["key"], c["label"]) for c in front["columns"]] == [
        (c.key, c.label) for c in front_columns(parse_spec({}))
    ]
    csv_header = api_client.get(
        f"/v1/studies/{name}/pareto", headers={"Accept": "text/csv"}
    ).text.splitlines()[0]
    assert csv_header.startswith("number,") and csv_header.index("accuracy") < csv_header.index(
        "latency_per_sample_ms"
    )


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"n_trials": 0}, "n_trials"),
        ({"n_trials": 51}, "n_trials"),
        ({"timeout_s": 1e9}, "timeout_s"),
        ({"target": "tpu"}, "target"),
        ({"search_space": "search_spaces/digits-mlp.yaml"}, "search_space"),
        ({"dataset": "os:system"}, "dataset"),
        ({"dataset": "../../etc/passwd.npz"}, "dataset"),
        ({"dataset": "/etc/x.npz"}, "dataset"),
        ({"dataset": "missing.npz"}, "dataset"),
        ({"objectives": [{"metric": "speed"}]}, "objectives.0.metric"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_specs_get_422_naming_the_field(submit_spec, spec, field):
    response = submit_spec(**spec)
    assert response.status_code == 422
    body = response.json()
    assert body["code"] in ("invalid_request", "invalid_spec")
    assert field in [e["field"] for e in body["errors"]]
    assert field.split(".")[0] in body["message"] or body["code"] == "invalid_spec"


@pytest.mark.parametrize(
    ("content", "content_type"),
    [
        ('{"search_space": "digits-mlp"}', "text/plain"),
        ("search_space=digits-mlp", "application/x-www-form-urlencoded"),
        ('[{"search_space": "digits-mlp"}]', "application/json"),
        ("", "application/json"),
    ],
)
def test_a_body_that_is_no_json_object_says_what_to_send(api_client, content, content_type):
    response = api_client.post(
        "/v1/studies", content=content, headers={"Content-Type": content_type}
    )
    assert response.status_code == 422
    assert "send one JSON object, with Content-Type: application/json" in response.json()["message"]


def test_a_refused_target_or_data_file_says_what_would_do(submit_spec):
    target = submit_spec(target="tpu").json()
    assert "known targets: ['a100'," in target["message"] and "'cpu'" in target["message"]
    data = submit_spec(dataset="missing.npz").json()
    assert "AUTOML_DATA_ROOT" in data["message"] and "copy the file there" in data["message"]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"dataset": "../../etc/x.npz"}, "dataset"),
        ({"dataset": "/etc/x.npz"}, "dataset"),
        ({"dataset": "x.csv"}, "dataset"),
        ({"dataset": "missing.npz"}, "dataset"),
        ({"model": {"weights": "../m.onnx"}}, "model.weights"),
    ],
)
def test_a_file_outside_the_data_root_is_refused_naming_the_setting(submit_spec, spec, field):
    response = submit_spec(**spec)
    assert response.status_code == 422, response.text
    assert [e["field"] for e in response.json()["errors"]] == [field]
    message = response.json()["message"]
    assert "AUTOML_DATA_ROOT" in message and "PUT /v1/files/{name}" in message


def test_npz_under_the_data_root_is_accepted(submit_spec, api_server):
    data_root = api_server.settings.data_root
    x, y = np.random.default_rng(0).normal(size=(60, 16)), np.arange(60) % 3
    np.savez(data_root / "mine.npz", x_train=x[:40], y_train=y[:40], x_test=x[40:], y_test=y[40:])
    response = submit_spec(dataset="mine.npz")
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["dataset"] == "mine.npz"  # as given, not the server path
    np.savez(data_root / "half.npz", x_train=x, y_train=y)  # no test split
    response = submit_spec(dataset="half.npz", name="half")
    assert response.status_code == 422 and "x_test" in response.json()["message"], response.text


def test_404_names_what_is_missing(api_client):
    response = api_client.get("/v1/studies/no-such-study")
    assert response.status_code == 404
    assert response.json() == {
        "code": "study_not_found",
        "message": "no study named 'no-such-study'; GET /v1/studies lists the existing ones",
    }
    assert api_client.get("/v1/nothing").json() == {
        "code": "not_found",
        "message": "not found: GET /v1/nothing",
    }


def test_a_stored_spec_this_version_cannot_read_is_left_out_of_the_list(
    submit_spec, api_client, api_server
):
    good = submit_spec().json()["name"]
    broken = optuna.create_study(study_name="from-the-future", storage=api_server.storage)
    broken.set_user_attr(SPEC_ATTR, {"name": "from-the-future", "n_trials": "many"})
    response = api_client.get("/v1/studies", params={"limit": 500})
    assert response.status_code == 200, response.text
    names = [s["name"] for s in response.json()["items"]]
    assert good in names and "from-the-future" not in names
