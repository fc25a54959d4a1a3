"""Uploading datasets and weights over a live API: stored under the data root atomically, checked
as a study's load checks them, capped, never written through a link or over another file."""

from __future__ import annotations

import hashlib
import io
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import httpx
import numpy as np
import pytest
import torch
from crafted import crafted_headers_npz

from api import create_app
from automl.storage.factory import open_storage

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytest_plugins = ["api_fixtures"]
pytestmark = pytest.mark.e2e  # a live server, and a child process per weights file
CAP_MB = 0.05  # AUTOML_DATA_MAX_MB of the server: 50,000 bytes a file


def _dataset(seed: int = 0) -> bytes:
    """A small, valid .npz dataset: 64 features, 3 classes."""
    x = np.random.default_rng(seed).normal(size=(60, 64)).astype(np.float32)
    y = np.arange(60) % 3
    buffer = io.BytesIO()
    np.savez(buffer, x_train=x[:40], y_train=y[:40], x_test=x[40:], y_test=y[40:])
    return buffer.getvalue()


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[httpx.Client, Path]]:
    """A live API whose uploads are capped at :data:`CAP_MB`; its client and data root."""
    from api_fixtures import TOKEN, live_server, make_settings

    root = tmp_path_factory.mktemp("files")
    url = f"sqlite:///{root / 'studies.db'}"
    settings = make_settings(root, url, data_max_mb=CAP_MB)
    storage = open_storage(url, settings)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with (
        live_server(create_app(settings, storage=storage)) as base,
        httpx.Client(base_url=base, headers=auth, timeout=60) as client,
    ):
        yield client, settings.data_root
    storage.engine.dispose()


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob(".upload-*"))


def test_a_stored_dataset_is_named_by_a_submission(server):
    client, root = server
    content = _dataset()
    stored = client.put("/v1/files/mine.npz", content=content)
    assert stored.status_code == 201, stored.text
    assert stored.json() == {
        "name": "mine.npz",
        "kind": "dataset",
        "field": "dataset",
        "size_bytes": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
    }
    assert (root / "mine.npz").read_bytes() == content
    submitted = client.post(
        "/v1/studies", json={"search_space": "tabular-mlp", "dataset": "mine.npz"}
    )
    assert submitted.status_code == 201, submitted.text
    assert submitted.json()["spec"]["dataset"] == "mine.npz"
    assert _leftovers(root) == []


def test_a_stored_file_is_never_replaced_and_a_retry_is_200(server):
    client, root = server
    first, other = _dataset(1), _dataset(2)
    assert client.put("/v1/files/kept.npz", content=first).status_code == 201
    retried = client.put("/v1/files/kept.npz", content=first)
    assert retried.status_code == 200 and retried.json()["name"] == "kept.npz"
    replaced = client.put("/v1/files/kept.npz", content=other)
    assert replaced.status_code == 409 and replaced.json()["code"] == "file_exists"
    assert "upload under another name" in replaced.json()["message"]
    assert (root / "kept.npz").read_bytes() == first
    assert _leftovers(root) == []


def test_a_name_that_is_a_link_is_never_written_through(server, tmp_path):
    client, root = server
    outside = tmp_path / "outside.npz"
    outside.write_bytes(b"theirs")
    (root / "link.npz").symlink_to(outside)
    (root / "dangling.npz").symlink_to(tmp_path / "nothing.npz")
    for name in ("link.npz", "dangling.npz"):
        response = client.put(f"/v1/files/{name}", content=_dataset())
        assert (response.status_code, response.json()["code"]) == (409, "file_exists")
    assert outside.read_bytes() == b"theirs"
    assert not (tmp_path / "nothing.npz").exists()


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("..%2Fescaped.npz", 404),
        ("sub%2Fescaped.npz", 404),
        ("%2E%2E", 422),
        (".hidden.npz", 422),
        ("escaped.csv", 422),
        ("escaped.onnx", 422),
    ],
)
def test_a_name_outside_the_data_root_or_of_no_known_kind_is_refused(server, name, status):
    client, root = server
    response = client.put(f"/v1/files/{name}", content=_dataset())
    assert response.status_code == status, response.text
    assert not list(root.parent.rglob("escaped*")) and _leftovers(root) == []
    if name.startswith("escaped"):
        assert "neither a dataset (.npz) nor weights (.pt, .pth)" in response.json()["message"]


def test_a_file_over_the_cap_is_413_declared_or_streamed(server):
    client, root = server
    content = bytes(int(CAP_MB * 1e6) + 1)
    declared = client.put("/v1/files/big.npz", content=content)
    streamed = client.put("/v1/files/big.npz", content=iter([content[:30000], content[30000:]]))
    for response in (declared, streamed):
        assert response.status_code == 413, response.text
        assert response.json()["message"] == "file over 50000 bytes (AUTOML_DATA_MAX_MB)"
    assert not (root / "big.npz").exists() and _leftovers(root) == []


def test_a_dataset_a_load_refuses_is_refused_with_its_reason(server, tmp_path):
    client, root = server
    crafted_headers_npz(tmp_path / "crafted.npz", {"x_train": ((10**6, 50), "<f4", 0)})
    x = np.zeros((4, 2))
    buffer = io.BytesIO()
    np.savez(buffer, x_train=x, y_train=np.arange(4) % 2)  # no test split
    cases = {
        "crafted.npz": ((tmp_path / "crafted.npz").read_bytes(), "damaged or crafted"),
        "text.npz": (b"not a zip archive", "is not a readable .npz"),
        "half.npz": (buffer.getvalue(), "lacks arrays ['x_test', 'y_test']"),
    }
    for name, (content, reason) in cases.items():
        response = client.put(f"/v1/files/{name}", content=content)
        assert (response.status_code, response.json()["code"]) == (422, "invalid_file")
        assert reason in response.json()["message"] and repr(name) in response.json()["message"]
        assert not (root / name).exists()
    assert _leftovers(root) == []


def test_weights_are_stored_once_torch_loads_them_as_a_state_dict(server, tmp_path):
    client, root = server
    saved = {
        "linear.pt": torch.nn.Linear(4, 3).state_dict(),
        "module.pth": torch.nn.Linear(4, 3),  # a pickled module: weights_only refuses it
    }
    for name, content in saved.items():
        torch.save(content, tmp_path / name)

    def upload(name: str) -> httpx.Response:
        return client.put(f"/v1/files/{name}", content=(tmp_path / name).read_bytes())

    with ThreadPoolExecutor(2) as pool:  # each is checked in a child that imports torch
        stored, refused = pool.map(upload, saved)
    assert stored.status_code == 201, stored.text
    assert (stored.json()["kind"], stored.json()["field"]) == ("weights", "model.weights")
    assert (root / "linear.pt").read_bytes() == (tmp_path / "linear.pt").read_bytes()
    assert (refused.status_code, refused.json()["code"]) == (422, "invalid_file"), refused.text
    assert "'module.pth' is not a state dict" in refused.json()["message"]
    assert "weights_only=True" in refused.json()["message"]
    assert not (root / "module.pth").exists() and _leftovers(root) == []
