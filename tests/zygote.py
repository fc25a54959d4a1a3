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

import json
import os
import select
import subprocess
import sys
import tempfile
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


def _startup_variables(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON") and k != "PYTHONPATH"}


def _serve() -> None:
    import importlib

    for name in PRELOADED:
        importlib.import_module(name)
    base_path = [p for p in sys.path if p and Path(p).resolve() != Path(__file__).parent]
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request, base_path)
        os.write(1, (json.dumps({"pid": pid}) + "\n").encode())
        _, status = os.waitpid(pid, 0)
        os.write(1, (json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n").encode())


def _child(request: dict, base_path: list[str]) -> None:
    """Become ``python -m automl *args`` as a fresh interpreter would run it; never returns."""
    import atexit
    import runpy
    import signal
    import threading
    import traceback

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [request["cwd"], *extra, *base_path]
    for fd, path, flags in (
        (0, os.devnull, os.O_RDONLY),
        (1, request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        (2, request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    ):
        os.dup2(os.open(path, flags), fd)
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
