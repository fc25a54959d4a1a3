"""Shared fixtures and helpers: the real digits dataset, and studies run by the real CLI."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml
from optuna.artifacts import FileSystemArtifactStore
from zygote import Zygote

from automl.catalog import _registry as catalog_registry
from automl.catalog.runtimes import _base as runtime_registry
from automl.inputs.data import Dataset, load_dataset
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.settings import Settings
from automl.storage.factory import open_artifact_store, open_storage

if TYPE_CHECKING:
    from collections.abc import Iterator

    from optuna.storages import BaseStorage


# A size budget that a small int8 MLP meets and a wide fp32 one does not: enqueue both to get
# one feasible and one infeasible trial.
SIZE_BUDGET = ["latency_p99_ms <= 5", "size_mb <= 0.02"]
FEASIBLE_AND_INFEASIBLE = [
    {"arch.width": 16, "arch.depth": 1, "bits": 8, "int8_mode": "static"},
    {"arch.width": 128, "arch.depth": 1, "bits": 32},
]
PG_DSN = "host=127.0.0.1 port=5432 dbname=test"
PG_USERS = ("postgres", "root")


def _pg_user() -> str | None:
    psycopg = pytest.importorskip("psycopg")
    for user in PG_USERS:
        try:
            with psycopg.connect(f"{PG_DSN} user={user}", connect_timeout=3):
                return user
        except psycopg.OperationalError:
            continue
    return None


@contextlib.contextmanager
def pg_schema() -> Iterator[str]:
    """A fresh PostgreSQL schema on 127.0.0.1:5432/test, dropped afterwards; yields its URL."""
    import psycopg

    user = _pg_user()
    if user is None:
        message = "PostgreSQL on 127.0.0.1:5432 (database test) is not reachable"
        if os.environ.get("CI"):
            pytest.fail(message)  # .ci/run starts it; a skip there would hide a broken setup
        pytest.skip(message)
    schema = f"api_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{PG_DSN} user={user}", autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"postgresql+psycopg://{user}@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(f"{PG_DSN} user={user}", autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(scope="session")
def digits() -> Dataset:
    return load_dataset("digits", seed=0)


def run_cli_study(
    root: Path, spec: dict, enqueued: list[dict], zygote: Zygote | None = None
) -> dict:
    """Create the study in ``root``, enqueue ``enqueued`` params, then run the real CLI on it,
    forked from ``zygote`` if one is given (the ``zygote`` fixture).

    Returns:
        ``root``, ``env`` (for further CLI calls), ``storage``, ``store`` and ``study``.
    """
    env = {
        **os.environ,
        "AUTOML_STORAGE": f"sqlite:///{root / 'automl.db'}",
        "AUTOML_ARTIFACTS_DIR": str(root / "artifacts"),
    }
    (root / "spec.yaml").write_text(yaml.safe_dump(spec))
    storage = open_storage(env["AUTOML_STORAGE"], Settings())
    study = create_study(parse_spec(spec), storage)
    for params in enqueued:
        study.enqueue_trial(params)
    args = ["study", "start", "spec.yaml"]  # runs the enqueued trials first
    if zygote is None:
        automl = Path(sys.executable).with_name("automl")
        subprocess.run(
            [automl, *args], cwd=root, env=env, check=True, capture_output=True, timeout=300
        )
    else:
        done = zygote.run(args, cwd=root, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
    return {
        "root": root,
        "env": env,
        "storage": storage,
        "store": FileSystemArtifactStore(env["AUTOML_ARTIFACTS_DIR"]),
        "study": study,
    }


# Trained once per run for the quantize and evaluate tests: (family, width, depth, epochs).
# Measured on the digits test split: cnn 94.4 %, mlp 97.2 %.
_TRAINED_ARCHS = {"cnn": ("cnn", 16, 2, 6), "mlp": ("mlp", 64, 1, 8)}


@pytest.fixture(scope="session")
def trained_models(digits) -> dict:
    """``{"cnn": module, "mlp": module}`` trained by the real train stage (CPU, eval mode).

    Shared by the whole run: do not train, prune or otherwise change them in place.
    """
    from automl.candidate import ArchConfig, TrainConfig
    from automl.models import build_model
    from automl.pipeline.train import train

    models = {}
    for name, (family, width, depth, epochs) in _TRAINED_ARCHS.items():
        model = build_model(
            ArchConfig(family, width, depth), digits.input_shape, digits.num_classes, seed=0
        )
        models[name] = train(model, digits, TrainConfig(epochs=epochs), seed=0).model
    return models


@pytest.fixture(scope="session")
def digits_cnn_weights(tmp_path_factory) -> Path:
    """The state dict of ``trained_factories:digits_cnn`` trained on the raw digits (pixels
    0..16, as a trained model's study feeds them), well above chance. Copy it to change it."""
    import torch
    from trained_factories import digits_cnn

    from automl.candidate import TrainConfig
    from automl.pipeline.train import train

    data = load_dataset("digits", standardize="none")
    result = train(digits_cnn(), data, TrainConfig(epochs=3, lr=1e-2), seed=0)
    path = tmp_path_factory.mktemp("trained") / "digits_cnn.pt"
    torch.save(result.model.state_dict(), path)
    return path


@pytest.fixture(scope="session")
def exported_models(trained_models, digits, tmp_path_factory) -> dict[str, Path]:
    """``{"cnn": path, "mlp": path}``: ``trained_models`` exported by the real export stage."""
    from automl.pipeline.export import export_onnx

    folder = tmp_path_factory.mktemp("exported")
    return {
        name: export_onnx(model, digits.x_test[:64], folder / f"{name}.onnx").path
        for name, model in trained_models.items()
    }


class PgProxy:
    """A TCP proxy to PostgreSQL that can drop every connection and refuse new ones for a while."""

    def __init__(self, port: int = 5432) -> None:
        self.target = ("127.0.0.1", port)
        self.connections: list[socket.socket] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, args=(self.server,), daemon=True).start()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return  # closed by outage()
            upstream = socket.create_connection(self.target)
            self.connections += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def outage(self, seconds: float) -> None:
        """Refuse and drop every connection for ``seconds``, as a database restart does."""
        self.down()
        time.sleep(seconds)
        self.up()

    def down(self) -> None:
        """Drop every connection, and refuse new ones until :meth:`up`."""
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread; close alone won't
        self.server.close()
        for connection in self.connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def up(self) -> None:
        """Accept connections again after :meth:`down`."""
        self.server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self.server,), daemon=True).start()


@pytest.fixture
def env(tmp_path) -> tuple[Settings, BaseStorage, FileSystemArtifactStore]:
    """Settings, storage and artifact store of a SQLite study store in ``tmp_path``."""
    settings = Settings(storage=f"sqlite:///{tmp_path}/s.db", artifacts_dir=tmp_path / "art")
    return settings, open_storage(settings.storage, settings), open_artifact_store(settings)


@pytest.fixture
def scratch_catalog() -> Iterator[None]:
    """Catalog entries that a test defines are forgotten after it."""
    saved = [(r, dict(r)) for r in (catalog_registry._METHODS, runtime_registry._BACKENDS)]
    yield
    for registry, entries in saved:
        registry.clear()
        registry.update(entries)


# What `nvidia-smi` prints on a host with two A100s, the first in MIG mode, per query.
FAKE_NVIDIA_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=name,mig.mode.current)
    printf 'NVIDIA A100-SXM4-80GB, Enabled\\nNVIDIA A100-SXM4-80GB, Disabled\\n' ;;
  --query-gpu=index,uuid,driver_version,name,mig.mode.current)
    printf '0, GPU-aaaa, 580.65.06, NVIDIA A100-SXM4-80GB, Enabled\\n'
    printf '1, GPU-bbbb, 580.65.06, NVIDIA A100-SXM4-80GB, Disabled\\n' ;;
  *) exit 6 ;;
esac
"""


@pytest.fixture
def a100_host(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``nvidia-smi`` that reports A100s, first on the PATH: the GPU itself is absent."""
    exe = tmp_path / "nvidia-smi"
    exe.write_text(FAKE_NVIDIA_SMI)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request, tmp_path):
    """A new SQLite file, then a new PostgreSQL schema: a test runs on both."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'study.db'}"
    else:
        with pg_schema() as url:
            yield url


@pytest.fixture(scope="session")
def zygote() -> Iterator[Zygote]:
    """One zygote per test worker: the command's libraries imported once (see tests/zygote.py)."""
    forker = Zygote()
    yield forker
    forker.close()


@pytest.fixture
def cli(tmp_path, zygote):
    """``cli(*args, check=True)`` runs ``python -m automl`` in ``tmp_path`` on its own storage,
    in a process forked from the worker's zygote.

    It has ``env``, ``root`` (``tmp_path``) and ``storage`` (the SQLite URL) for tests that
    start the command themselves.
    """
    env = {
        **os.environ,
        "AUTOML_STORAGE": f"sqlite:///{tmp_path}/studies/automl.db",
        "AUTOML_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
        "AUTOML_HEARTBEAT_INTERVAL_S": "1",
        "AUTOML_GRACE_PERIOD_S": "3",
        "COLUMNS": "320",
    }

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = zygote.run(list(args), cwd=tmp_path, env=env, timeout=600)
        if check:
            assert done.returncode == 0, done.stderr
        return done

    run.env = env
    run.root = tmp_path
    run.storage = env["AUTOML_STORAGE"]
    return run


# Fixtures that start the `automl` command or a live server: their tests are end to end.
_END_TO_END_FIXTURES = frozenset({"cli", "run_api", "api_server"})


@pytest.hookimpl(trylast=True)  # after ``-m`` has deselected what will not run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``e2e`` every test that runs the command or a server (``make test-fast`` skips
    them, with the ``slow`` ones; ``make test`` runs everything), start what ``background``
    tests wait on, then put the modules of slow tests first, and of e2e tests next (see
    :func:`_longest_first`)."""
    for item in items:
        if _END_TO_END_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)
        background = item.get_closest_marker("background")
        if background and not config.option.collectonly:
            background.args[0]()
    _longest_first(items)


def _longest_first(items: list[pytest.Item]) -> None:
    """Order the modules slow, then e2e, then the rest, and last those of ``background`` tests
    (what they wait on runs meanwhile), each module kept whole and in order.

    ``--dist loadgroup`` hands tests out in this order: a long test handed out last keeps one
    worker busy while the other has nothing left to do, so the long ones go first and the
    short unit tests fill in at the end. A module stays together, so that each worker sets up
    its module fixtures once.
    """
    rank: dict[Path, int] = {}
    for item in items:
        cost = 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("e2e") else 2
        rank[item.path] = min(rank.get(item.path, 2), cost)
    for item in items:
        if item.get_closest_marker("background"):
            rank[item.path] = 3
    items.sort(key=lambda item: rank[item.path])
