"""``automl serve``'s local worker processes: a killed or crashed one is started again, and none
starts on an artifacts folder it cannot write."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest
from disks import tmpfs

from api import create_app
from api.serve import LocalWorkers, serve
from automl.errors import SpecError
from automl.settings import Settings
from automl.storage.factory import open_storage

pytest_plugins = ["api_fixtures"]


def _wait_for(predicate, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_killed_worker_is_started_again():
    workers = LocalWorkers([(60,)], target=time.sleep, poll_s=0.05)
    workers.start()
    try:
        first = workers._processes[0]
        _wait_for(lambda: first.pid is not None and first.is_alive())
        os.kill(first.pid, signal.SIGKILL)
        _wait_for(lambda: workers._processes[0] is not first and workers._processes[0].is_alive())
    finally:
        workers.stop()
    assert not any(p.is_alive() for p in workers._processes if p is not None)


def test_a_worker_that_keeps_crashing_at_start_is_left_dead_and_one_that_stopped_too(caplog):
    crashing = LocalWorkers([(1,), (0,)], target=sys.exit, poll_s=0.05, crash_loop_restarts=2)
    with caplog.at_level("INFO", logger="api.serve"):
        crashing.start()
        _wait_for(lambda: crashing._processes == [None, None])
        crashing.stop()
    restarts = [r for r in caplog.records if "starting it again" in r.getMessage()]
    assert len(restarts) == 2  # then the third quick death in a row leaves it dead
    assert any("not started again" in r.getMessage() for r in caplog.records)
    assert any(r.getMessage() == "worker 1 stopped" for r in caplog.records)  # exit 0: no restart


def test_a_worker_stopped_by_a_full_or_read_only_disk_is_not_started_again(caplog):
    stopped = LocalWorkers([(3,)], target=sys.exit, poll_s=0.05)  # worker_process's exit on it
    with caplog.at_level("INFO", logger="api.serve"):
        stopped.start()
        _wait_for(lambda: stopped._processes == [None])
        stopped.stop()
    assert not any("starting it again" in r.getMessage() for r in caplog.records)
    assert any("worker 0 stopped: its log above says why" in r.getMessage() for r in caplog.records)


def test_no_worker_is_started_again_once_the_server_is_shutting_down():
    shutting_down = False
    workers = LocalWorkers([(60,)], target=time.sleep, poll_s=0.05, halted=lambda: shutting_down)
    workers.start()
    try:
        first = workers._processes[0]
        _wait_for(lambda: first.pid is not None and first.is_alive())
        shutting_down = True  # as a Ctrl-C to the whole group tells uvicorn and the workers
        os.kill(first.pid, signal.SIGKILL)
        first.join()
        time.sleep(0.5)
        assert workers._processes[0] is first
    finally:
        workers.stop()


def test_healthz_counts_the_live_workers_and_is_503_once_all_have_died(
    api_settings, run_api, tmp_path
):
    url = f"sqlite:///{tmp_path}/s.db"
    settings = api_settings(url)
    app = create_app(settings, storage=open_storage(url, settings))
    with run_api(app) as base:
        app.state.local_workers = LocalWorkers([(60,)], target=time.sleep, poll_s=0.05)
        app.state.local_workers.start()
        try:
            alive = httpx.get(f"{base}/healthz")
        finally:
            app.state.local_workers.stop()
        crashing = LocalWorkers([(1,)], target=sys.exit, poll_s=0.05, crash_loop_restarts=0)
        app.state.local_workers = crashing
        crashing.start()
        _wait_for(lambda: crashing.live() == 0)
        dead = httpx.get(f"{base}/healthz")
        crashing.stop()
    assert (alive.status_code, alive.json()["workers"]) == (200, 1)
    assert (dead.status_code, dead.json()["code"]) == (503, "no_live_worker")


def test_serve_refuses_a_read_only_artifacts_folder_before_it_starts(cli, zygote):
    folder = cli.root / "artifacts"
    with tmpfs(folder, size_kb=64, read_only=True):  # root writes through permission bits
        env = {**cli.env, "AUTOML_DEV_MODE": "true"}  # it would serve, on loopback
        out = zygote.run(["serve", "--port", "0"], cwd=cli.root, env=env, timeout=30)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert " ".join(out.stderr.split()) == (
        f"error: artifacts folder '{folder}' cannot be written: Read-only file system; give a "
        "writable --artifacts-dir (or AUTOML_ARTIFACTS_DIR)"
    )
    assert not (cli.root / "studies").exists()  # no storage was created for it


def _files_where_artifacts_go(root: Path, *folders: str) -> str:
    """A file where each folder's ``artifacts`` would be, and the refusal that names one."""
    for folder in folders:
        (root / folder).mkdir()
        (root / folder / "artifacts").write_text("")
    return (
        "artifacts folder '{}' cannot be written: it is a file, not a folder; give a writable "
        "--artifacts-dir (or AUTOML_ARTIFACTS_DIR)"
    )


def test_serve_finds_the_artifacts_beside_the_storage_it_is_given(tmp_path, monkeypatch):
    refusal = _files_where_artifacts_go(tmp_path, "env", "given")
    monkeypatch.delenv("AUTOML_ARTIFACTS_DIR", raising=False)
    settings = Settings(storage=f"sqlite:///{tmp_path}/env/s.db", dev_mode=True)
    with pytest.raises(SpecError) as refused:  # before a server or worker starts
        serve(port=0, storage_url=f"sqlite:///{tmp_path}/given/s.db", settings=settings)
    assert str(refused.value) == refusal.format(tmp_path / "given" / "artifacts")


def test_serve_takes_artifacts_dir_over_the_environment(cli, zygote):
    refusal = _files_where_artifacts_go(cli.root, "flag")
    folder = cli.root / "flag" / "artifacts"
    env = {**cli.env, "AUTOML_DEV_MODE": "true"}
    out = zygote.run(
        ["serve", "--port", "0", "--artifacts-dir", str(folder)], cwd=cli.root, env=env, timeout=30
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert " ".join(out.stderr.split()) == "error: " + refusal.format(folder)
