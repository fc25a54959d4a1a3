"""`api.serve.serve` in a real process: submit over HTTP, a local worker runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

pytest_plugins = ["api_fixtures"]

# On PostgreSQL, the store of a fleet. `automl serve` on SQLite runs a study end to end in
# test_examples.py (submit_over_rest.py: a local worker, the model downloaded) and in
# test_bad_submission.py; this one study of about 20 s need not run on both.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.parametrize("api_storage_url", ["postgresql"], indirect=True),
]


def _start_serve(api_storage_url: str, tmp_path, port: int, api_token: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "AUTOML_API_TOKENS": json.dumps([api_token]),
        "AUTOML_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
        "AUTOML_DATA_ROOT": str(tmp_path / "data"),
    }
    code = f"from api.serve import serve; serve('127.0.0.1', {port}, 1, {api_storage_url!r})"
    log = (tmp_path / "serve.log").open("w")
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


def _wait_until(predicate, timeout_s: float, what: str, log) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except httpx.TransportError:
            value = None
        if value:
            return value
        time.sleep(0.3)
    pytest.fail(f"{what} within {timeout_s} s; server log:\n{log.read_text()[-3000:]}")


def _raw_digits_test_split(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The test split of the raw 8×8 digits that a study of ``seed`` holds out."""
    digits = load_digits()
    images = digits.images.astype(np.float32)[:, None, :, :]
    _, x_test, _, y_test = train_test_split(
        images, digits.target, test_size=0.2, random_state=seed, stratify=digits.target
    )
    return x_test, y_test


def _test_accuracy(model: bytes, detail: dict, seed: int) -> float:
    """The model's accuracy on the raw test split, preprocessed and batched as its trial was."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = detail["env"]["intra_op_threads"]
    session = ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
    x_raw, y = _raw_digits_test_split(seed)
    standardize = detail["preprocessing"]["standardize"]
    x = (x_raw - np.float32(standardize["mean"])) / np.float32(standardize["std"])
    batch = detail["candidate"]["batch_size"]  # int8 dynamic scales depend on the batch
    name = session.get_inputs()[0].name
    logits = np.concatenate(
        [session.run(None, {name: x[i : i + batch]})[0] for i in range(0, len(x), batch)]
    )
    assert logits.shape == (len(y), 10)
    return float((logits.argmax(1) == y).mean())


def test_submitted_study_runs_on_a_local_worker_and_its_model_runs_in_ort(
    api_storage_url, tmp_path, api_port, api_token
):

    port = api_port
    process = _start_serve(api_storage_url, tmp_path, port, api_token)
    log = tmp_path / "serve.log"
    headers = {"Authorization": f"Bearer {api_token}"}
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=60
        ) as api_client:
            _wait_until(
                lambda: api_client.get("/healthz").status_code == 200, 30, "no /healthz", log
            )
            seed = 1
            spec = {"name": "e2e", "search_space": "digits-mlp", "n_trials": 2, "seed": seed}
            assert api_client.post("/v1/studies", json=spec).status_code == 201

            def finished() -> dict | None:
                study = api_client.get("/v1/studies/e2e").json()
                return study if study["state"] not in ("queued", "running") else None

            study = _wait_until(finished, 90, "the study did not finish", log)
            assert study["state"] == "done", study
            assert study["counts"]["COMPLETE"] == 2

            front = api_client.get("/v1/studies/e2e/pareto").json()["trials"]
            assert front
            best = max(front, key=lambda t: t["values"]["accuracy"])
            detail = api_client.get(f"/v1/studies/e2e/trials/{best['number']}").json()
            assert set(detail["timings"]) >= {"train", "export", "quantize", "latency"}
            assert detail["latency_source"] == "measured"
            for trial in front:  # a quantized trial says what quantization gained over fp32
                quantized = api_client.get(f"/v1/studies/e2e/trials/{trial['number']}").json()
                gain = quantized["metrics"].get("quantization_gain")
                assert (gain is None) == (quantized["candidate"]["bits"] == 32)
                assert gain is None or quantized["quantization"]["gain"] == gain

            csv_front = api_client.get("/v1/studies/e2e/pareto", headers={"Accept": "text/csv"})
            assert best["model_url"] in csv_front.text
            assert f'href="{best["model_url"]}"' in api_client.get("/v1/studies/e2e/report").text

            response = api_client.get(best["model_url"])
            assert response.status_code == 200
            assert response.headers["content-type"] == "application/octet-stream"
            metadata = {p.key for p in onnx.load_from_string(response.content).metadata_props}
            assert {"automl.input", "automl.preprocessing", "automl.class_names"} <= metadata
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0  # a requested stop is a clean exit
    accuracy = _test_accuracy(response.content, detail, seed)
    assert accuracy == detail["metrics"]["test_accuracy"] == best["metrics"]["test_accuracy"]
    assert accuracy > 0.8
    assert "stopping 1 worker(s)" in log.read_text()
