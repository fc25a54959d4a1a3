"""API fixtures: real storages (SQLite and PostgreSQL), a real uvicorn server on loopback, and
a scan of every response the REST tests receive for the server's absolute paths.

The scan lives here, not in a ``tests/rest/conftest.py``: a second module named ``conftest``
would shadow ``tests/conftest.py`` for every ``from conftest import ...`` of the suite. Every
module of ``tests/rest`` loads this plugin (``pytest_plugins = ["api_fixtures"]``).
"""

from __future__ import annotations

import contextlib
import re
import socket
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import optuna
import pytest
import uvicorn
from conftest import pg_schema
from pydantic import SecretStr

from api import create_app
from automl.settings import Settings
from automl.storage.factory import open_storage

if TYPE_CHECKING:
    from collections.abc import Iterator

    from fastapi import FastAPI

TOKEN = "test-api_token-0123456789"
_REST_TESTS = Path(__file__).resolve().parent


def server_paths(basetemp: Path) -> list[Path]:
    """The folders of this server that no REST body may name: the tests' temporary folders
    (data roots, artifacts, uploads), the system temp folder, the checkout, the virtualenv and
    the home folder."""
    folders = {basetemp, Path(tempfile.gettempdir()), _REST_TESTS.parents[1], Path(sys.prefix)}
    folders |= {Path.home()}
    return sorted({p for f in folders for p in (f, f.resolve())}, key=lambda p: -len(str(p)))


def named_paths(body: str, folders: list[Path]) -> list[str]:
    """The absolute paths under ``folders`` that ``body`` names (empty when none)."""
    pattern = "|".join(re.escape(str(f)) for f in folders)
    return re.findall(rf"(?<![\w.])(?:{pattern})(?=[/'\"\s\\:,;)]|$)[^'\"\s]*", body)


@pytest.fixture(autouse=True)
def no_server_path_in_any_response(request, tmp_path_factory, monkeypatch) -> Iterator[None]:
    """Fail a REST test if any HTTP response it received names an absolute path of the server."""
    if not request.node.path.is_relative_to(_REST_TESTS):
        yield
        return
    folders = server_paths(tmp_path_factory.getbasetemp())
    leaks: list[str] = []
    send = httpx.Client.send

    def scanned(client: httpx.Client, http_request: httpx.Request, **kwargs) -> httpx.Response:
        response = send(client, http_request, **kwargs)
        if not kwargs.get("stream"):
            found = named_paths(response.content.decode(errors="replace"), folders)
            leaks.extend(f"{http_request.method} {http_request.url.path}: {p}" for p in found)
        return response

    monkeypatch.setattr(httpx.Client, "send", scanned)
    yield
    assert not leaks, f"responses named absolute paths of the server: {leaks}"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api_storage_url(request, tmp_path_factory) -> Iterator[str]:
    """A storage URL per backend, isolated per test module."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'studies.db'}"
        return
    with pg_schema() as url:
        yield url


def make_settings(root: Path, api_storage_url: str, **overrides: object) -> Settings:
    """Settings for tests: one token, data and artifacts under ``root``, small caps."""
    (root / "data").mkdir(parents=True, exist_ok=True)
    values: dict = {
        "storage": api_storage_url,
        "artifacts_dir": root / "artifacts",
        "data_root": root / "data",
        "api_tokens": [SecretStr(TOKEN)],
        "max_n_trials": 50,
        "max_timeout_s": 3600,
        "heartbeat_interval_s": 5,
        "grace_period_s": 20,
    }
    return Settings(_env_file=None, **{**values, **overrides})


@pytest.fixture
def api_port() -> int:
    """A TCP port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def api_token() -> str:
    """The bearer token the test settings accept."""
    return TOKEN


@contextlib.contextmanager
def live_server(app: FastAPI) -> Iterator[str]:
    """Run ``app`` under uvicorn on 127.0.0.1 in a thread; yields the base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@dataclass(frozen=True)
class Served:
    """A live API: its base URL, and the storage and settings behind it."""

    url: str
    storage: optuna.storages.RDBStorage
    settings: Settings


@pytest.fixture(scope="module")
def api_server(api_storage_url, tmp_path_factory) -> Iterator[Served]:
    """A live API over ``api_storage_url``, shared by the tests of a module."""
    settings = make_settings(tmp_path_factory.mktemp("api"), api_storage_url)
    storage = open_storage(api_storage_url, settings)
    with live_server(create_app(settings, storage=storage)) as url:
        yield Served(url, storage, settings)
    storage.engine.dispose()


@pytest.fixture
def api_client(api_server) -> Iterator[httpx.Client]:
    """An authenticated client of the live API."""
    with httpx.Client(base_url=api_server.url, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


def _synthetic_trial(number: int, accuracy: float, latency_ms: float) -> optuna.trial.FrozenTrial:
    """A COMPLETE trial with the attrs a real one has; infeasible when p99 exceeds 5 ms."""
    p99 = 2 * latency_ms
    return optuna.trial.create_trial(
        values=[accuracy, latency_ms],
        params={"arch.width": 16 * (number % 8 + 1)},
        distributions={"arch.width": optuna.distributions.IntDistribution(16, 128, step=16)},
        user_attrs={
            "accuracy": accuracy,
            "latency_per_sample_ms": latency_ms,
            "latency_p99_ms": p99,
            "feasible": p99 <= 5,
            "timings": {"train": 1.0, "export": 0.1},
        },
        constraints={"latency_p99_ms <= 5": p99 - 5},
    )


@pytest.fixture
def submit_spec(api_client):
    """POST a spec (digits-mlp on cpu unless given) and return the response."""

    def _submit(headers: dict | None = None, **spec: object) -> httpx.Response:
        body = {"search_space": "digits-mlp", "n_trials": 2, **spec}
        return api_client.post("/v1/studies", json=body, headers=headers or {})

    return _submit


@pytest.fixture
def synthetic_trial():
    """Build a synthetic COMPLETE trial: ``synthetic_trial(number, accuracy, latency_ms)``."""
    return _synthetic_trial


@pytest.fixture
def unique_name():
    """``unique_name(prefix)``: a study name no other test uses."""
    return lambda prefix: f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def run_api():
    """``with run_api(app) as url:`` serves any app under uvicorn on loopback."""
    return live_server


@pytest.fixture
def api_settings(tmp_path):
    """``api_settings(api_storage_url, **overrides)``: test settings rooted in ``tmp_path``."""
    return lambda api_storage_url, **overrides: make_settings(
        tmp_path, api_storage_url, **overrides
    )
