"""Running the real ``automl`` command in tests: counts read from its SQLite storage, a
process whose output a test can wait on, and a started `automl serve` waited on."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

AUTOML = [sys.executable, "-m", "automl"]


def count_state(storage: str, state: str) -> int:
    """Trials in ``state``."""
    return count(storage, "SELECT count(*) FROM trials WHERE state = ?", state)


def count(storage: str, query: str, *args: str) -> int:
    """A count, read-only: polling must not take write locks from the CLI under test."""
    path = storage.removeprefix("sqlite:///")
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            return db.execute(query, args).fetchone()[0]
    except sqlite3.OperationalError:  # no file or no tables yet
        return 0


class CliRun:
    """A CLI process whose stdout a thread drains, so that a test can wait on what it shows.

    The environment makes rich draw its live progress line into the pipe, as on a terminal.
    With a ``zygote``, the process is forked from it in a new session (see ``Zygote.popen``).
    """

    def __init__(self, args: list[str], cwd, env: dict[str, str], zygote=None, **popen) -> None:
        live = {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"}
        if zygote is not None and args[: len(AUTOML)] == AUTOML:
            self.process = zygote.popen(
                args[len(AUTOML) :], cwd=cwd, env={**env, **live}, merge_stderr=False
            )
        else:
            self.process = subprocess.Popen(
                args, cwd=cwd, env={**env, **live}, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, **popen,
            )  # fmt: skip
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    @property
    def stdout(self) -> str:
        return b"".join(self._chunks).decode(errors="replace")

    def _drain(self) -> None:
        while chunk := os.read(self.process.stdout.fileno(), 65536):
            self._chunks.append(chunk)

    def wait_for(self, text: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.stdout:
            assert self.process.poll() is None, f"exited before showing {text!r}"
            assert time.monotonic() < deadline, f"never showed {text!r}"
            time.sleep(0.1)

    def finish(self, timeout: float) -> tuple[str, str]:
        self.process.wait(timeout)
        self._reader.join()
        return self.stdout, self.process.stderr.read()


PACED = """name: paced
params:
  arch.family: {type: fixed, value: mlp}
  arch.width: {type: int, low: 16, high: 64, step: 16}
  arch.depth: {type: int, low: 1, high: 2}
  batch_size: {type: categorical, choices: [1, 32]}
  train.epochs: {type: fixed, value: %d}
"""


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def free_port() -> int:
    """A TCP port of 127.0.0.1 that is free now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_serve(root: Path, port: int, env: dict[str, str]) -> subprocess.Popen:
    """`automl serve` with one local worker on ``port``, in ``root`` and a session of its own,
    its output in ``root / "serve.log"``."""
    automl = Path(sys.executable).with_name("automl")
    log = (root / "serve.log").open("w")
    return subprocess.Popen(
        [automl, "serve", "--port", str(port), "--workers", "1"], cwd=root, env=env,
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def stop_server(server: subprocess.Popen, timeout_s: float) -> None:
    """Stop an `automl serve` as its operator would (SIGTERM, then wait); kill its whole group
    if it has not exited within ``timeout_s``."""
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def wait_healthy(url: str, root: Path, timeout_s: float = 120) -> None:
    """Wait until the `automl serve` at ``url`` answers /healthz with 200; fail the test with
    the end of its log, ``root / "serve.log"``, if it does not within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    pytest.fail(f"automl serve did not start; log:\n{(root / 'serve.log').read_text()[-3000:]}")
