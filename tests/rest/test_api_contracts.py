"""The API's promises on a real uvicorn server: idempotency, caps, names, status codes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from automl.records import METRICS
from automl.search.space import list_spaces
from automl.targets import list_targets

pytest_plugins = ["api_fixtures"]


def test_a_key_reused_with_another_request_is_refused_naming_the_key(submit_spec, unique_name):
    key = unique_name("k")
    assert submit_spec(headers={"Idempotency-Key": key}).status_code == 201
    for changed in (
        {"search_space": "digits-cnn"},
        {"target": "a100", "search_space": "digits-gpu"},
        {"seed": 7},
    ):
        response = submit_spec(headers={"Idempotency-Key": key}, **changed)
        assert response.status_code == 422, (changed, response.text)
        assert response.json()["code"] == "idempotency_key_reused"
        assert key in response.json()["message"]
    assert submit_spec(headers={"Idempotency-Key": key}).status_code == 200


def test_concurrent_retries_replay_the_one_study(api_server, unique_name):
    body = {"search_space": "digits-mlp", "n_trials": 2}
    for _ in range(4):
        key = unique_name("race")

        def post(_: int, key: str = key) -> httpx.Response:
            with httpx.Client(base_url=api_server.url, headers=_auth(key)) as client:
                return client.post("/v1/studies", json=body)

        with ThreadPoolExecutor(max_workers=4) as pool:
            responses = list(pool.map(post, range(4)))
        codes = sorted(r.status_code for r in responses)
        assert codes == [200, 200, 200, 201], [r.text for r in responses]
        assert len({r.json()["name"] for r in responses}) == 1


def test_a_spec_without_n_trials_gets_the_cap(submit_spec, api_server):
    response = submit_spec(n_trials=None, timeout_s=15)
    assert response.status_code == 201, response.text
    assert response.json()["n_trials"] == api_server.settings.max_n_trials
    assert response.json()["spec"]["n_trials"] == api_server.settings.max_n_trials


def test_a_name_with_a_control_character_is_refused(submit_spec):
    for name in ("trail\n", "tab\tname", "nul\x00"):
        response = submit_spec(name=name)
        assert response.status_code == 422, (name, response.text)
        assert response.json()["errors"][0]["field"] == "name"


def test_bad_input_is_a_4xx_never_a_500(submit_spec, api_server):
    data = api_server.settings.data_root
    np.savez(
        data / "strings.npz",
        x_train=np.array([["a", "b"]] * 8), y_train=np.arange(8) % 2,
        x_test=np.array([["a", "b"]] * 4), y_test=np.arange(4) % 2,
    )  # fmt: skip
    for spec in ({"seed": -99999999999999999999}, {"seed": -1}, {"dataset": "strings.npz"}):
        response = submit_spec(**spec)
        assert 400 <= response.status_code < 500, (spec, response.text)


def test_invalid_json_is_400_as_documented(api_client):
    response = api_client.post(
        "/v1/studies", content=b'{"search_space": "digits-mlp",', headers=_json()
    )
    assert response.status_code == 400
    assert response.json()["code"] == "bad_request"
    assert "not valid JSON" in response.json()["message"]
    documented = api_client.get("/openapi.json").json()["paths"]["/v1/studies"]["post"]
    assert "400" in documented["responses"]


def test_a_dataset_is_returned_as_given(submit_spec, api_server):
    x = np.random.default_rng(0).normal(size=(40, 16)).astype(np.float32)
    y = np.arange(40) % 2
    np.savez(api_server.settings.data_root / "ok.npz", x_train=x, y_train=y, x_test=x, y_test=y)
    response = submit_spec(dataset="ok.npz")
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["dataset"] == "ok.npz"
    assert str(api_server.settings.data_root) not in response.text


def test_the_schema_enumerates_metrics_targets_and_spaces(api_client):
    schemas = api_client.get("/openapi.json").json()["components"]["schemas"]
    as_object, as_name = schemas["Objective"]["anyOf"]  # an objective, or its metric's name
    assert as_object["properties"]["metric"]["enum"] == as_name["enum"] == list(METRICS)
    assert schemas["Constraint"]["properties"]["metric"]["enum"] == list(METRICS)
    spec = schemas["StudySpec"]["properties"]
    assert spec["target"]["enum"] == [t.name for t in list_targets()]
    assert spec["search_space"]["enum"] == list_spaces()


def _auth(key: str) -> dict[str, str]:
    from api_fixtures import TOKEN

    return {"Authorization": f"Bearer {TOKEN}", "Idempotency-Key": key}


def _json() -> dict[str, str]:
    return {"Content-Type": "application/json"}


def test_a_method_not_allowed_names_every_allowed_method(api_client):
    for method, path, allowed in (("OPTIONS", "/v1/studies", "GET, POST"),
                                  ("DELETE", "/v1/studies", "GET, POST")):  # fmt: skip
        response = api_client.request(method, path)
        assert response.status_code == 405
        assert response.headers["allow"] == allowed


def test_a_refused_dataset_is_named_as_given_never_by_its_server_path(submit_spec, api_server):
    x = np.ones((40, 4), np.float32)
    x[5, 2] = np.nan
    y = np.arange(40) % 2
    np.savez(api_server.settings.data_root / "nan.npz", x_train=x, y_train=y, x_test=x, y_test=y)
    response = submit_spec(dataset="nan.npz")
    assert response.status_code == 422, response.text
    assert "x_train of 'nan.npz'" in response.json()["message"]
    assert str(api_server.settings.data_root) not in response.text


def test_an_infinite_bound_is_refused(submit_spec):
    response = submit_spec(constraints=[{"metric": "latency_p99_ms", "op": "<=", "bound": "inf"}])
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"].startswith("constraints")


def _resident_kb(field: str) -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split(f"{field}:")[1].split()[0])


@pytest.mark.slow
def test_a_crafted_npz_is_refused_over_rest_without_decompressing_it(submit_spec, api_server):
    from crafted import crafted_npz

    crafted_npz(api_server.settings.data_root / "bomb.npz")  # 1.2 MB holding 1.2 GB
    Path("/proc/self/clear_refs").write_text("5")  # the server runs in this process
    before = _resident_kb("VmRSS")
    response = submit_spec(dataset="bomb.npz")
    grown_kb = _resident_kb("VmHWM") - before
    assert response.status_code == 422, response.text
    assert "x_train of 'bomb.npz' has 6000000 samples" in response.json()["message"]
    assert grown_kb < 200_000  # decompressed, it would be 1.2 GB more
