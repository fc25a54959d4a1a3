"""The OpenAPI viewers render offline: Swagger UI at /docs and ReDoc at /redoc, driven in real
headless Chromium over the DevTools protocol, list the API's routes, and no request of theirs
leaves 127.0.0.1. The schema describes every field of a spec."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit
from urllib.request import urlopen

import httpx
import pytest
from optuna.storages import InMemoryStorage
from websockets.sync.client import connect

from api import create_app

if TYPE_CHECKING:
    from collections.abc import Iterator

pytest_plugins = ["api_fixtures"]
# One browser visits both pages, once: one process runs the module.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("test_api_docs")]

# What each page shows once rendered: Swagger UI's operation paths, ReDoc's text.
RENDERED = {
    "/docs": "[...document.querySelectorAll('.opblock-summary-path')].map(e => e.dataset.path)",
    "/redoc": "document.querySelector('redoc') && document.querySelector('redoc').textContent",
}
_QUIET_S = 0.5  # a page has settled once its browser has reported nothing for this long


class Page:
    """A Chromium tab driven over the DevTools protocol, recording the requests it sends."""

    def __init__(self, websocket) -> None:
        self.websocket, self.events, self.calls = websocket, [], 0

    def call(self, method: str, **params: object) -> dict:
        """Send one command; the events that come before its answer are recorded."""
        self.calls += 1
        self.websocket.send(json.dumps({"id": self.calls, "method": method, "params": params}))
        while True:
            message = json.loads(self.websocket.recv(timeout=30))
            if message.get("id") == self.calls:
                return message.get("result", {})
            self.events.append(message)

    def visit(self, url: str, rendered: str, done: str) -> object:
        """Open ``url`` and wait until the value of the script ``rendered`` shows ``done``;
        then until the page is quiet. Returns that value (None if it never showed)."""
        self.call("Page.navigate", url=url)
        deadline, value = time.monotonic() + 30, None
        while time.monotonic() < deadline and done not in (value or ()):
            value = self.call("Runtime.evaluate", expression=rendered, returnByValue=True)
            value = value["result"].get("value")
            time.sleep(0.1)
        try:
            while True:
                self.events.append(json.loads(self.websocket.recv(timeout=_QUIET_S)))
        except TimeoutError:
            return value

    def left_loopback(self) -> list[str]:
        """The URLs the page asked for beyond 127.0.0.1, except those its content security
        policy stopped before they were sent."""
        stopped = {
            e["params"]["requestId"]
            for e in self.events
            if e["method"] == "Network.loadingFailed" and e["params"].get("blockedReason") == "csp"
        }
        asked = [
            (e["params"]["requestId"], e["params"]["request"]["url"])
            for e in self.events
            if e["method"] == "Network.requestWillBeSent"
        ]
        return [
            url
            for request, url in asked
            if urlsplit(url).scheme not in ("data", "blob")
            and urlsplit(url).hostname != "127.0.0.1"
            and request not in stopped
        ]


@contextlib.contextmanager
def chromium_page(profile: Path) -> Iterator[str]:
    """Headless Chromium with its DevTools endpoint on loopback, which no name resolves
    beyond; yields the DevTools WebSocket URL of its tab."""
    binary = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(binary).exists():
        pytest.fail("Chromium is missing: run .ci/chromium.sh")
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--remote-debugging-port=0",
        f"--user-data-dir={profile}", "about:blank",
    ]  # fmt: skip
    browser = subprocess.Popen([binary, *flags], stderr=subprocess.DEVNULL)
    try:
        yield _tab(browser, profile / "DevToolsActivePort")
    finally:
        browser.terminate()
        browser.wait(10)


def _tab(browser: subprocess.Popen, port_file: Path) -> str:
    """The DevTools WebSocket URL of the browser's tab, once it listens (it writes its port
    to ``port_file``)."""
    deadline = time.monotonic() + 30
    while not port_file.is_file() or not port_file.read_text().strip():
        assert browser.poll() is None and time.monotonic() < deadline, "Chromium did not start"
        time.sleep(0.05)
    port = port_file.read_text().split()[0]
    with urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as listing:
        return next(t for t in json.load(listing) if t["type"] == "page")["webSocketDebuggerUrl"]


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[str]:
    """A live API over an in-memory storage; its base URL."""
    from api_fixtures import live_server, make_settings

    settings = make_settings(tmp_path_factory.mktemp("docs"), "sqlite://")
    with live_server(create_app(settings, storage=InMemoryStorage())) as url:
        yield url


@pytest.fixture(scope="module")
def visited(served, tmp_path_factory) -> dict:
    """Each viewer's page as Chromium rendered it: the value it showed and the URLs it asked
    for beyond 127.0.0.1; and the API's OpenAPI paths."""
    shown: dict = {"paths": set(httpx.get(f"{served}/openapi.json").json()["paths"])}
    with (
        chromium_page(tmp_path_factory.mktemp("profile")) as tab,
        connect(tab, max_size=None) as websocket,
    ):
        for route, rendered in RENDERED.items():
            page = Page(websocket)
            page.call("Network.enable")
            value = page.visit(f"{served}{route}", rendered, "/v1/studies/{name}/pareto")
            shown[route] = {"value": value, "left": page.left_loopback()}
    return shown


def test_swagger_ui_lists_every_route_with_nothing_from_beyond_loopback(visited):
    assert set(visited["/docs"]["value"] or ()) == visited["paths"]
    assert visited["/docs"]["left"] == []


def test_redoc_shows_every_route_with_nothing_from_beyond_loopback(visited):
    text = visited["/redoc"]["value"] or ""
    assert [path for path in visited["paths"] if path not in text] == []
    assert visited["/redoc"]["left"] == []


def test_every_field_of_a_spec_is_described(served):
    schemas = httpx.get(f"{served}/openapi.json").json()["components"]["schemas"]
    models = _referenced(schemas, "StudySpec")
    undescribed = [
        f"{model}.{field}"
        for model in models
        for field, schema in _fields(schemas[model]).items()
        if not schema.get("description")
    ]
    assert undescribed == []
    assert models >= {"StudySpec", "TrainedModel", "Serving", "Objective", "Constraint"}
    assert "AUTOML_DATA_ROOT" in schemas["StudySpec"]["properties"]["dataset"]["description"]


def _fields(schema: dict) -> dict:
    """A model's properties; an objective is an object or its metric's name."""
    return next(
        form["properties"] for form in schema.get("anyOf", [schema]) if "properties" in form
    )


def _referenced(schemas: dict, name: str, seen: set | None = None) -> set[str]:
    """``name`` and every schema that it refers to, directly or through others."""
    seen = set() if seen is None else seen
    seen.add(name)
    for found in re.findall(r'"#/components/schemas/([^"]+)"', json.dumps(schemas[name])):
        if found not in seen:
            _referenced(schemas, found, seen)
    return seen
