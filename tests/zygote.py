"""The ``automl`` command, run in a process forked from one that has its libraries imported.

A fresh ``python -m automl study start`` spends about 4 s of CPU importing torch (and torch's
compiler, which its optimisers load), ONNX, ONNX Runtime, Optuna and scikit-learn before its first
trial; the tests start it over a hundred times. A zygote imports those third-party libraries
once, with none of automl, and forks a child per command: the child sets the command's working
folder, environment, ``sys.path`` and file descriptors as a fresh interpreter would have them,
then runs ``python -m automl`` exactly, automl's own imports included, and ends as an interpreter
ends (its threads joined, its ``atexit`` functions run, an uncaught Ctrl-C re-raised as SIGINT).

The command is still a real process: its own pid, exit status, signals, stdout and stderr; the
processes it starts itself (workers, model checks) are fresh interpreters. A command whose
environment differs from the zygote's in a variable that Python reads at start-up
(``PYTHON*`` other than ``PYTHONPATH``) runs as a plain subprocess instead.

Run as a script, this file is the zygote: one JSON request per line on stdin, answered on stdout
with the child's pid, then its exit status.
"""

from __future__ import annotations

import io
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# Third-party libraries that automl's commands import; nothing that reads the environment or the
# terminal when imported (rich, typer and automl itself are imported by each child).
PRELOADED = (
    "numpy", "scipy", "torch", "torch._dynamo", "torch_pruning", "onnx", "onnxruntime",
    "onnxruntime.quantization", "optuna", "sqlalchemy", "alembic", "sklearn.model_selection",
    "sklearn.gaussian_process", "pydantic", "yaml",
)  # fmt: skip


class Zygote:
    """A zygote process for one test worker; :meth:`run` is ``subprocess.run`` of the command."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=os.environ.copy(),
        )  # fmt: skip
        self._startup = _startup_variables(os.environ)

    def run(
        self, args: list[str], *, cwd: Path, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess:
        """``python -m automl *args`` in ``cwd`` with ``env``: its exit status and output."""
        command = [sys.executable, "-m", "automl", *args]
        if _startup_variables(env) != self._startup:
            return subprocess.run(
                command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
            )
        with tempfile.TemporaryDirectory() as folder:
            out, err = Path(folder, "stdout"), Path(folder, "stderr")
            request = {"args": args, "cwd": str(cwd), "env": env, "out": str(out), "err": str(err)}
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
            pid = self._answer(30)["pid"]
            try:
                code = self._answer(timeout)["returncode"]
            except subprocess.TimeoutExpired:
                os.kill(pid, 9)
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
        if _startup_variables(env) != self._startup:
            return subprocess.Popen(
                [sys.executable, "-m", "automl", *args], cwd=cwd, env=env, text=True,
                stdout=subprocess.PIPE, start_new_session=True,
                stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            )  # fmt: skip
        folder = Path(tempfile.mkdtemp(prefix="zygote-"))
        out, err, status = folder / "stdout", folder / "stderr", folder / "status"
        os.mkfifo(out)
        err = out if merge_stderr else err
        request = {"args": args, "cwd": str(cwd), "env": env, "out": str(out), "err": str(err),
                   "status": str(status)}  # fmt: skip
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        return ForkedProcess(self._answer(30)["pid"], out, status)

    def close(self) -> None:
        """End the zygote."""
        self._process.stdin.close()
        self._process.wait(timeout=30)

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


def _startup_variables(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON") and k != "PYTHONPATH"}


def _serve() -> None:
    import importlib

    for name in PRELOADED:
        importlib.import_module(name)
    base_path = [p for p in sys.path if p and Path(p).resolve() != Path(__file__).parent]
    for line in sys.stdin:
        request = json.loads(line)
        if "status" in request:
            _start_in_background(request, base_path)
            continue
        pid = os.fork()
        if pid == 0:
            _child(request, base_path)
        os.write(1, (json.dumps({"pid": pid}) + "\n").encode())
        _, status = os.waitpid(pid, 0)
        os.write(1, (json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n").encode())


def _start_in_background(request: dict, base_path: list[str]) -> None:
    """Fork a parent for the command, which forks it, says its pid, and writes its exit status
    to the status file when it ends; answer that pid."""
    while True:  # reap the parents of commands that have ended
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    read, write = os.pipe()
    if os.fork() == 0:
        _ending_at_os_exit(_watch_in_background, request, base_path, read, write)
    os.close(write)
    with os.fdopen(read) as answer:
        pid = int(answer.readline())
    os.write(1, (json.dumps({"pid": pid}) + "\n").encode())


def _watch_in_background(request: dict, base_path: list[str], read: int, write: int) -> None:
    """The parent of a background command: say its pid, then write its exit status."""
    os.close(read)
    for fd in (0, 1):  # the zygote's requests and answers are not this process's
        os.dup2(os.open(os.devnull, os.O_RDWR), fd)
    pid = os.fork()
    if pid == 0:
        os.setsid()
        _child(request, base_path)
    os.write(write, f"{pid}\n".encode())
    _, status = os.waitpid(pid, 0)
    done = Path(request["status"])
    done.with_suffix(".tmp").write_text(str(os.waitstatus_to_exitcode(status)))
    done.with_suffix(".tmp").rename(done)  # whole, never half written
    os._exit(0)


def _ending_at_os_exit(function, *args: object) -> None:
    """Run ``function`` in a forked process that ends at ``os._exit``, whatever it raises.

    A forked process that ends through the interpreter instead runs ONNX Runtime's C++
    destructors, which wait forever on a condition of a (telemetry) thread that only the zygote
    has: the command hangs instead of failing.
    """
    import traceback

    try:
        function(*args)
    except BaseException:
        traceback.print_exc()
    os._exit(1)


def _child(request: dict, base_path: list[str]) -> None:
    """Become ``python -m automl *args`` as a fresh interpreter would run it; never returns."""
    _ending_at_os_exit(_run_command, request, base_path)


def _run_command(request: dict, base_path: list[str]) -> None:
    import atexit
    import runpy
    import signal
    import threading
    import traceback

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for fd, path, flags in (  # first, so that what fails after is in the command's stderr
        (0, os.devnull, os.O_RDONLY),
        (1, request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        (2, request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    ):
        if fd == 2 and path == request["out"]:  # stderr=STDOUT (a FIFO is opened once)
            os.dup2(1, 2)
            continue
        opened = os.open(path, flags)
        if opened != fd:
            os.dup2(opened, fd)
            os.close(opened)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [request["cwd"], *extra, *base_path]
    sys.argv = ["", *request["args"]]
    code = 0
    try:
        runpy.run_module("automl", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = _exit_code(e.code)
    except KeyboardInterrupt:
        code = -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()  # as the interpreter does at exit: join the threads left running
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    if code == -signal.SIGINT:  # as Python does for an uncaught KeyboardInterrupt
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
    os._exit(code)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    _serve()
