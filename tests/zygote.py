"""The ``automl`` command, and Python code or scripts, run in processes forked from one that has
their libraries imported.

A fresh ``python -m automl study start`` spends about 4 s of CPU importing torch (and torch's
compiler, which its optimisers load), ONNX, ONNX Runtime, Optuna and scikit-learn before its first
trial; the tests start it over a hundred times. A zygote imports those third-party libraries
once, with none of automl, and forks a child per command: the child sets the command's working
folder, environment, ``sys.path`` and file descriptors as a fresh interpreter would have them,
then runs ``python -m automl`` (or ``python -c CODE``, or ``python SCRIPT``) exactly, automl's own
imports included, and ends as an interpreter ends (its threads joined, its ``atexit`` functions
run, an uncaught Ctrl-C re-raised as SIGINT).

The command is still a real process: its own pid, exit status, signals, stdout and stderr; the
processes it starts itself (workers, model checks) are fresh interpreters. A command whose
environment differs from the zygote's in a variable that Python reads at start-up
(``PYTHON*`` other than ``PYTHONPATH``), or that gives Python options, runs in a fresh
interpreter instead.

The zygote, ``tests/bin/zygote_server.py``, takes requests two ways, in one loop:

- one JSON request per line on stdin (:class:`Zygote`'s ``run`` and ``popen``), answered on
  stdout with the child's pid, then its exit status; the command's output goes to files;
- connections to its unix socket (:attr:`Zygote.socket_path`), from ``tests/bin/automl`` (the
  ``automl`` command) and ``tests/bin/zygote_client.py`` (``python ARGV``; :meth:`Zygote.python`):
  one JSON request for ``python ARGV`` with its folder and environment, sent with the client's
  stdin, stdout and stderr (SCM_RIGHTS). A process forked per connection forks the command onto
  those descriptors and answers its pid, then its exit status; the client passes SIGINT and
  SIGTERM on, and exits as the command did.
"""

from __future__ import annotations

import io
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BIN = Path(__file__).resolve().parent / "bin"  # the zygote, its client, and `automl` through it
SOCKET_VARIABLE = "ZYGOTE_SOCKET"  # where tests/bin/zygote_client.py finds the socket


class Zygote:
    """A zygote process for one test worker; :meth:`run` is ``subprocess.run`` of the command."""

    def __init__(self) -> None:
        self.socket_path = Path(tempfile.mkdtemp(prefix="zygote-"), "socket")
        with socket.socket(socket.AF_UNIX) as listener:  # listening before the zygote has started
            listener.bind(str(self.socket_path))
            listener.listen(16)
            self._process = subprocess.Popen(
                [sys.executable, BIN / "zygote_server.py", str(listener.fileno())],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ.copy(),
                pass_fds=[listener.fileno()],
            )  # fmt: skip

    def client_env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with the zygote's socket, and tests/bin first on its PATH: ``automl`` there
        is forked from the zygote."""
        path = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        return {**env, "PATH": path, SOCKET_VARIABLE: str(self.socket_path)}

    def python(
        self, argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess:
        """``python *argv`` (``-c CODE`` or ``SCRIPT ARGS``) in ``cwd`` with ``env`` (see
        :meth:`client_env`), forked from the zygote through its socket: as ``subprocess.run``
        with ``capture_output=True, text=True``."""
        return subprocess.run(
            [sys.executable, BIN / "zygote_client.py", *argv], cwd=cwd, env=self.client_env(env),
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip

    def popen_python(
        self, argv: list[str], *, cwd: Path, env: dict[str, str], **popen: object
    ) -> subprocess.Popen:
        """``python *argv`` as :meth:`python` runs it, in the background: a ``subprocess.Popen``
        (``popen`` its other arguments) of the client, which passes SIGINT and SIGTERM on to the
        command and exits as it does. SIGKILL ends the client only: kill the command by its pid."""
        return subprocess.Popen(
            [sys.executable, BIN / "zygote_client.py", *argv], cwd=cwd,
            env=self.client_env(env), **popen,
        )  # fmt: skip

    def run(
        self, args: list[str], *, cwd: Path, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess:
        """``python -m automl *args`` in ``cwd`` with ``env``: its exit status and output."""
        command = [sys.executable, "-m", "automl", *args]
        with tempfile.TemporaryDirectory() as folder:
            out, err = Path(folder, "stdout"), Path(folder, "stderr")
            request = {"args": args, "cwd": str(cwd), "env": env, "out": str(out), "err": str(err)}
            answer = self._request(request)
            if "fresh" in answer:
                return subprocess.run(
                    command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
                )
            try:
                code = self._answer(timeout)["returncode"]
            except subprocess.TimeoutExpired:
                os.kill(answer["pid"], 9)
                self._answer(30)
                raise
            return subprocess.CompletedProcess(
                command, code, out.read_text(errors="replace"), err.read_text(errors="replace")
            )

    def popen(
        self, args: list[str], *, cwd: Path, env: dict[str, str], merge_stderr: bool = True
    ) -> ForkedProcess:
        """``python -m automl *args`` started in the background, in a new session (so that
        ``os.killpg(process.pid, ...)`` reaches it and what it starts): as ``subprocess.Popen``
        with ``stdout=PIPE, text=True`` and ``stderr=STDOUT``, or, unless ``merge_stderr``,
        a ``stderr`` to read once it has ended."""
        folder = Path(tempfile.mkdtemp(prefix="zygote-"))
        out, err, status = folder / "stdout", folder / "stderr", folder / "status"
        os.mkfifo(out)
        err = out if merge_stderr else err
        request = {"args": args, "cwd": str(cwd), "env": env, "out": str(out), "err": str(err),
                   "status": str(status)}  # fmt: skip
        answer = self._request(request)
        if "pid" in answer:
            return ForkedProcess(answer["pid"], out, status)
        shutil.rmtree(folder)
        return subprocess.Popen(
            [sys.executable, "-m", "automl", *args], cwd=cwd, env=env, text=True,
            stdout=subprocess.PIPE, start_new_session=True,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        )  # fmt: skip

    def close(self) -> None:
        """End the zygote."""
        self._process.stdin.close()
        self._process.wait(timeout=30)
        shutil.rmtree(self.socket_path.parent)

    def _request(self, request: dict) -> dict:
        """Send a request on the zygote's stdin: its first answer, ``pid`` or ``fresh`` (the
        python to run the command with instead, where a fork would not run it as that would)."""
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        return self._answer(30)

    def _answer(self, timeout: float) -> dict:
        ready, _, _ = select.select([self._process.stdout], [], [], timeout)
        if not ready:
            raise subprocess.TimeoutExpired("automl", timeout)
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the zygote exited with status {self._process.wait()}")
        return json.loads(line)


class ForkedProcess:
    """A command that :meth:`Zygote.popen` started: the parts of ``subprocess.Popen`` tests use.

    Its parent is a process of the zygote's, which writes its exit status to ``status``.
    """

    def __init__(self, pid: int, out: Path, status: Path) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.stderr: io.StringIO | None = None  # filled when it ends, unless merged
        self._status = status
        self.stdout = open(out, errors="replace")  # noqa: SIM115 - closed at its end of file

    def poll(self) -> int | None:
        """The exit status, or None while it runs."""
        if self.returncode is None and self._status.exists():
            self.returncode = int(self._status.read_text())
            if (err := self._status.with_name("stderr")).exists():
                self.stderr = io.StringIO(err.read_text(errors="replace"))
            shutil.rmtree(self._status.parent)  # its output, a FIFO, stays open to read
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for its end; ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("automl", timeout)
            time.sleep(0.05)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str | None]:
        """The rest of its output and its stderr (None if merged), once it has ended."""
        rest: list[str] = []
        reader = threading.Thread(target=lambda: rest.append(self.stdout.read()), daemon=True)
        reader.start()
        self.wait(timeout)
        reader.join(timeout)
        if reader.is_alive():  # a process it started still holds the output open
            raise subprocess.TimeoutExpired("automl", timeout)
        self.stdout.close()
        return rest[0], None if self.stderr is None else self.stderr.read()

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` to the process (not its group), if it has not ended."""
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        """SIGKILL it."""
        self.send_signal(signal.SIGKILL)
