"""One bad submission over REST fails its own study only: `automl serve`'s workers go on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import flaky_model
import httpx
import pytest
import torch
from cli_runs import free_port, start_serve, stop_server, wait_healthy

pytestmark = pytest.mark.e2e  # a real `automl serve`, its real local worker
pytest_plugins = ["api_fixtures"]  # its responses are scanned for server paths too

TOKEN = "bad-submission-token-0123456789"


def _serve(root: Path, port: int) -> subprocess.Popen:
    """`automl serve` with one worker, a data root, a token and ``mymodel:build`` allowed."""
    (root / "factories").mkdir()
    # Its model runs once and then raises: the model's check runs it twice, so the check (in
    # the API's child, then in the worker) dies of a LookupError.
    shutil.copy(flaky_model.__file__, root / "factories" / "mymodel.py")
    paths = [str(root / "factories"), os.environ.get("PYTHONPATH", "")]
    env = {
        **os.environ,
        "AUTOML_STORAGE": f"sqlite:///{root / 'automl.db'}",
        "AUTOML_ARTIFACTS_DIR": str(root / "artifacts"),
        "AUTOML_DATA_ROOT": str(root / "data"),
        "AUTOML_API_TOKENS": json.dumps([TOKEN]),
        "AUTOML_MODEL_FACTORIES": json.dumps(["mymodel:build"]),
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
    }
    return start_serve(root, port, env)


class _Health:
    """Reads /healthz every 0.2 s in a thread, keeping every status it got."""

    def __init__(self, url: str) -> None:
        self.url, self.codes, self._done = url, [], threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> _Health:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join(10)

    def _poll(self) -> None:
        while not self._done.wait(0.2):
            try:
                self.codes.append(httpx.get(f"{self.url}/healthz", timeout=10).status_code)
            except httpx.TransportError as e:  # no answer is no 200 either
                self.codes.append(type(e).__name__)


def _ended(client: httpx.Client, name: str, timeout_s: float = 240) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        study = client.get(f"/v1/studies/{name}").json()
        if study["state"] in ("failed", "done"):
            return study
        time.sleep(0.5)
    raise AssertionError(f"study {name} did not end: {study}")


def _post_model(client: httpx.Client, weights: str) -> httpx.Response:
    model = {"factory": "mymodel:build", "weights": weights}
    body = {"search_space": "trained-model", "n_trials": 2, "model": model}
    return client.post("/v1/studies", json=body)


def test_bad_weights_fail_their_own_study_and_the_worker_runs_the_next(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "empty.pt").write_bytes(b"")  # the 0-byte weights
    fitting = {"fc.weight": torch.randn(10, 64), "fc.bias": torch.zeros(10)}  # mymodel's shapes
    torch.save(fitting, tmp_path / "data" / "flaky.pt")
    port, log = free_port(), tmp_path / "serve.log"
    url = f"http://127.0.0.1:{port}"
    server = _serve(tmp_path, port)
    try:
        wait_healthy(url, tmp_path)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with _Health(url) as health, httpx.Client(base_url=url, headers=auth, timeout=120) as c:
            empty, flaky = _post_model(c, "empty.pt"), _post_model(c, "flaky.pt")
            good = c.post("/v1/studies", json={"search_space": "digits-mlp", "n_trials": 1})
            assert good.status_code == 201, good.text
            done = _ended(c, good.json()["name"])
            refused = _ended(c, flaky.json()["name"]) if flaky.status_code == 201 else None
    finally:
        stop_server(server, 60)
    said = log.read_text()
    assert done["state"] == "done" and done["counts"]["COMPLETE"] == 1, said[-3000:]
    assert health.codes and set(health.codes) == {200}, said[-3000:]
    assert flaky.status_code == 201  # the API's check crashed: it is left to the worker
    assert refused["state"] == "failed"
    assert "(LookupError: codebook exhausted after one batch)" in refused["error"]
    assert empty.status_code == 422, empty.text  # the API's check refuses it at once
    assert "'empty.pt' is empty (0 bytes)" in empty.text
    assert "Traceback" in said  # the worker logged the unexpected error's traceback
    assert "not started again" not in said
