from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import PgProxy, pg_schema
from fastapi.routing import iter_route_contexts
from optuna.storages import InMemoryStorage

from api import create_app
from api.security import DEV_TOKEN
from api.serve import serve
from automl.errors import SpecError
from automl.storage.factory import open_storage

pytest_plugins = ["api_fixtures"]


def test_healthz_needs_no_token_and_checks_storage(api_server):
    response = httpx.get(f"{api_server.url}/healthz")
    assert response.json() == {"status": "ok", "storage": "ok", "workers": None}


def test_missing_token_is_401_and_wrong_token_is_403(api_server):
    missing = httpx.get(f"{api_server.url}/v1/targets")
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    assert missing.json()["code"] == "unauthorized"
    basic = httpx.get(f"{api_server.url}/v1/targets", headers={"Authorization": "Basic eDp5"})
    assert basic.status_code == 401
    wrong = httpx.get(f"{api_server.url}/v1/targets", headers={"Authorization": "Bearer nope"})
    assert (wrong.status_code, wrong.json()["code"]) == (403, "forbidden")


def test_bodies_over_the_limit_get_413_declared_or_streamed(api_client):
    body = b'{"name": "' + b"a" * (1024 * 1024) + b'"}'
    declared = api_client.post(
        "/v1/studies", content=body, headers={"Content-Type": "application/json"}
    )
    assert (declared.status_code, declared.json()["code"]) == (413, "payload_too_large")
    chunks = (body[i : i + 65536] for i in range(0, len(body), 65536))
    streamed = api_client.post(
        "/v1/studies", content=chunks, headers={"Content-Type": "application/json"}
    )
    assert (streamed.status_code, streamed.json()["code"]) == (413, "payload_too_large")
    small = api_client.post("/v1/studies", content=b'{"n_trials": 0}')
    assert small.status_code == 422


def test_targets_and_search_spaces_are_listed(api_client):
    targets = {t["name"]: t for t in api_client.get("/v1/targets").json()}
    assert targets["cpu"]["present"] is True
    assert targets["a100"]["kind"] == "cuda"
    spaces = {s["name"]: s for s in api_client.get("/v1/search-spaces").json()}
    assert {"digits-mlp", "digits-cnn", "digits-mixed"} <= set(spaces)
    assert spaces["digits-mlp"]["params"]["arch.family"] == {"type": "fixed", "value": "mlp"}


# Open by choice (docs/rest.md): the schema holds no data, and clients generate code from it.
OPEN_ROUTES = {"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}


def test_every_route_but_health_and_the_schema_needs_a_token(api_settings, run_api):
    app = create_app(api_settings("sqlite://"), storage=InMemoryStorage())
    routes = [
        (method, route.path)
        for route in iter_route_contexts(app.routes)  # included routers' routes too
        for method in sorted(route.methods or ())
        if method != "HEAD"
    ]  # every route the app has, so a new one is held to this the moment it exists
    assert {path for _, path in routes} >= OPEN_ROUTES
    with run_api(app) as url:
        answers = {
            (method, path): httpx.request(
                method, url + path.replace("{name}", "example").replace("{number}", "0")
            ).status_code
            for method, path in routes
        }
    assert {key: code for key, code in answers.items() if key[1] in OPEN_ROUTES} == {
        key: 200 for key in answers if key[1] in OPEN_ROUTES
    }
    closed = {key: code for key, code in answers.items() if key[1] not in OPEN_ROUTES}
    assert len(closed) >= 9 and set(closed.values()) == {401}, closed
    docs = (Path(__file__).parents[2] / "docs" / "rest.md").read_text()
    (rule,) = [p for p in docs.split("\n\n") if p.startswith("Every route but")]
    assert all(f"`{path}`" in rule for path in OPEN_ROUTES), rule  # as the docs say


def test_openapi_documents_every_route(api_server):
    paths = httpx.get(f"{api_server.url}/openapi.json").json()["paths"]
    assert {
        "/healthz",
        "/v1/studies",
        "/v1/studies/{name}",
        "/v1/studies/{name}/stop",
        "/v1/studies/{name}/pareto",
        "/v1/studies/{name}/trials",
        "/v1/studies/{name}/trials/{number}",
        "/v1/studies/{name}/trials/{number}/model",
        "/v1/targets",
        "/v1/search-spaces",
    } <= set(paths)
    assert httpx.get(f"{api_server.url}/docs").status_code == 200


class _BrokenStorage(InMemoryStorage):
    def get_all_studies(self):
        raise RuntimeError("secret internals")


def test_500_is_json_without_internals(api_settings, run_api, api_token):
    app = create_app(api_settings("sqlite://"), storage=_BrokenStorage())
    with run_api(app) as url:
        crashed = httpx.get(f"{url}/v1/studies", headers={"Authorization": f"Bearer {api_token}"})
    assert crashed.status_code == 500
    assert crashed.json() == {
        "code": "internal_error",
        "message": "internal server error; see the server log",
    }


def test_healthz_is_503_while_postgresql_is_down(api_settings, run_api):
    with pg_schema() as direct_url:
        proxy = PgProxy()
        url = direct_url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
        settings = api_settings(url)
        app = create_app(settings, storage=open_storage(url, settings))
        with run_api(app) as base:
            healthy = httpx.get(f"{base}/healthz")
            outage = threading.Thread(target=proxy.outage, args=(3,))
            outage.start()
            time.sleep(0.5)
            down = httpx.get(f"{base}/healthz", timeout=30)
            outage.join()
            back = httpx.get(f"{base}/healthz", timeout=30)
    assert healthy.status_code == back.status_code == 200
    assert (down.status_code, down.json().get("code")) == (503, "storage_unavailable"), down.text
    assert "refused" not in down.text and str(proxy.port) not in down.text


def test_tokens_come_from_a_file(api_settings, run_api, tmp_path):
    (tmp_path / "tokens").write_text("# ci\nfile-token-1\n\nfile-token-2\n")
    settings = api_settings("sqlite://", api_tokens=[], api_token_file=tmp_path / "tokens")
    with run_api(create_app(settings, storage=InMemoryStorage())) as url:
        ok = httpx.get(f"{url}/v1/targets", headers={"Authorization": "Bearer file-token-2"})
        comment = httpx.get(f"{url}/v1/targets", headers={"Authorization": "Bearer # ci"})
    assert (ok.status_code, comment.status_code) == (200, 403)


def test_no_token_needs_dev_mode_and_dev_mode_needs_loopback(api_settings, run_api):
    with pytest.raises(SpecError, match="no API token configured"):
        create_app(api_settings("sqlite://", api_tokens=[]), storage=InMemoryStorage())
    dev = api_settings("sqlite://", api_tokens=[], dev_mode=True)
    with run_api(create_app(dev, storage=InMemoryStorage())) as url:
        auth = {"Authorization": f"Bearer {DEV_TOKEN}"}
        assert httpx.get(f"{url}/v1/targets", headers=auth).status_code == 200
    with pytest.raises(SpecError, match="refusing to serve on"):
        serve("0.0.0.0", 8000, 0, "sqlite://", settings=dev)
    with pytest.raises(SpecError, match="no API token configured"):
        serve("127.0.0.1", 8000, 0, "sqlite://", settings=api_settings("sqlite://", api_tokens=[]))


def test_importing_the_api_does_not_import_torch():
    code = (
        "import sys, api, api.serve\n"
        "from api.main import create_app\n"
        "from automl.settings import Settings\n"
        "app = create_app(Settings(_env_file=None, dev_mode=True, storage='sqlite://',"
        " artifacts_dir='/tmp/automl-api-import-check'))\n"
        "app.openapi()\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
