"""The zygote that tests/zygote.py describes and starts: ``python zygote_server.py FD``, where
FD is its listening unix socket.

It imports the libraries of automl's commands, then serves, in one loop that never waits on a
socket's command: the requests of :class:`zygote.Zygote` on stdin, and the connections of
``zygote_client.py``. Every process it forks ends at ``os._exit`` (see
:func:`_ending_at_os_exit`).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import runpy
import select
import signal
import socket
import sys
import threading
import time
import types
from pathlib import Path

# Third-party libraries that automl's commands import; nothing that reads the environment or the
# terminal when imported (rich, typer and automl itself are imported by each child).
PRELOADED = (
    "numpy", "scipy", "torch", "torch._dynamo", "torch_pruning", "onnx", "onnxruntime",
    "onnxruntime.quantization", "optuna", "sqlalchemy", "alembic", "sklearn.model_selection",
    "sklearn.gaussian_process", "sklearn.datasets", "pydantic", "pydantic.main",
    "pydantic.json_schema", "pydantic.dataclasses", "pydantic.type_adapter", "pydantic_settings",
    "yaml", "sqlalchemy.orm", "sqlalchemy.dialects.sqlite", "optuna.storages._rdb.models",
    "optuna.artifacts", "alembic.command", "alembic.config",
)  # fmt: skip
_LISTENER: socket.socket | None = None  # the zygote's socket, which no forked process keeps


def _serve(listener_fd: int) -> None:
    """The zygote's loop: requests on stdin and connections to the socket, until stdin ends."""
    import importlib

    global _LISTENER
    for name in PRELOADED:
        importlib.import_module(name)
    base_path = [p for p in sys.path if p and Path(p).resolve() != Path(__file__).parent]
    _LISTENER = socket.socket(fileno=listener_fd)
    pending = b""
    while True:
        _reap()
        ready, _, _ = select.select([0, _LISTENER], [], [])
        if _LISTENER in ready:
            _start_for_connection(base_path)
        if 0 in ready:
            if not (data := os.read(0, 1 << 16)):
                return
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                _answer_request(json.loads(line), base_path)


def _reap() -> None:
    """Reap the forked processes that watched commands which have ended."""
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _answer_request(request: dict, base_path: list[str]) -> None:
    """A request from stdin: ``fresh`` where a fork would differ, else a command started in the
    background, or one run to its end meanwhile."""
    if not _forks_as_fresh(request):
        _answer({"fresh": sys.executable})
    elif "status" in request:
        _start_in_background(request, base_path)
    else:
        pid = os.fork()
        if pid == 0:
            _child(request, base_path)
        _answer({"pid": pid})
        _, status = os.waitpid(pid, 0)
        _answer({"returncode": os.waitstatus_to_exitcode(status)})


def _answer(answer: dict) -> None:
    os.write(1, (json.dumps(answer) + "\n").encode())


def _start_in_background(request: dict, base_path: list[str]) -> None:
    """Fork a parent for the command, which forks it, says its pid, and writes its exit status
    to the status file when it ends; answer that pid."""
    read, write = os.pipe()
    if os.fork() == 0:
        _ending_at_os_exit(_watch_in_background, request, base_path, read, write)
    os.close(write)
    with os.fdopen(read) as said:
        _answer({"pid": int(said.readline())})


def _watch_in_background(request: dict, base_path: list[str], read: int, write: int) -> None:
    """The parent of a background command: say its pid, then write its exit status."""
    os.close(read)
    _leave_the_zygote()
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


def _start_for_connection(base_path: list[str]) -> None:
    """Accept a connection and fork a process that serves it; never wait on it here."""
    connection, _ = _LISTENER.accept()
    if os.fork() == 0:
        _ending_at_os_exit(_serve_connection, connection, base_path)
    connection.close()


def _serve_connection(connection: socket.socket, base_path: list[str]) -> None:
    """Read the request and the client's stdin, stdout and stderr; fork the command onto them
    and answer its pid, then its exit status; or answer ``fresh`` where a fork would differ."""
    _leave_the_zygote()
    data, fds = b"", []
    while not data.endswith(b"\n"):
        chunk, received, _, _ = socket.recv_fds(connection, 1 << 16, 3)
        if not chunk:
            raise ConnectionError("the client hung up before the end of its request")
        data, fds = data + chunk, fds + received
    request = json.loads(data)
    if not _forks_as_fresh(request):
        _tell(connection, {"fresh": sys.executable})
        os._exit(0)
    pid = os.fork()
    if pid == 0:
        connection.close()
        _child(request, base_path, fds)
    for fd in fds:
        os.close(fd)
    _tell(connection, {"pid": pid})
    _, status = os.waitpid(pid, 0)
    _tell(connection, {"returncode": os.waitstatus_to_exitcode(status)})
    os._exit(0)


def _forks_as_fresh(request: dict) -> bool:
    """Whether a forked child runs ``python ARGV`` as a fresh interpreter would: the same
    variables that Python reads at start-up (``PYTHON*`` but ``PYTHONPATH``), and no
    interpreter options before ``-m``, ``-c`` or the script."""
    if _startup_variables(request["env"]) != _startup_variables(os.environ):
        return False
    argv = _argv(request)
    return bool(argv) and ((argv[0] in ("-m", "-c") and len(argv) > 1) or argv[0][:1] != "-")


def _startup_variables(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON") and k != "PYTHONPATH"}


def _argv(request: dict) -> list[str]:
    """The request's ``python ARGV``: stdin's requests are ``-m automl ARGS``."""
    return request["python"] if "python" in request else ["-m", "automl", *request["args"]]


def _tell(connection: socket.socket, answer: dict) -> None:
    """Answer the client, unless it has gone (its command runs on: a fresh one would)."""
    with contextlib.suppress(OSError):
        connection.sendall((json.dumps(answer) + "\n").encode())


def _leave_the_zygote() -> None:
    """In a process forked from the zygote: drop its socket and its stdin and stdout (the
    requests and answers of ``Zygote``, which are not this process's)."""
    _LISTENER.close()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    os.close(null)


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


def _child(request: dict, base_path: list[str], fds: list[int] | None = None) -> None:
    """Become ``python ARGV`` as a fresh interpreter would run it, on ``fds`` (stdin, stdout,
    stderr) or else the request's files; never returns."""
    _ending_at_os_exit(_run_command, request, base_path, fds)


def _run_command(request: dict, base_path: list[str], fds: list[int] | None) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _LISTENER.close()
    if fds is None:  # first, so that what fails after is in the command's stderr
        _open_output_files(request)
    else:
        for fd, received in enumerate(fds):
            os.dup2(received, fd)
            os.close(received)
    _fresh_stdio()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if "numpy" in sys.modules:  # its global generator, seeded once in the zygote
        sys.modules["numpy"].random.seed()
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    code = _run_main(_argv(request), request["cwd"], [*extra, *base_path])
    threading._shutdown()  # as the interpreter does at exit: join the threads left running
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    if code == -signal.SIGINT:  # as Python does for an uncaught KeyboardInterrupt
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
    os._exit(code)


def _open_output_files(request: dict) -> None:
    for fd, path, flags in (
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


def _fresh_stdio() -> None:
    """``sys.stdin``, ``stdout`` and ``stderr`` opened on fds 0-2 as an interpreter starting now
    opens them (stdout line-buffered on a terminal, stderr always)."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        old = getattr(sys, name)
        stream = io.TextIOWrapper(
            open(fd, "wb" if fd else "rb", closefd=False),  # noqa: SIM115 - as Python's own
            encoding=old.encoding, errors=old.errors, newline="\n",
            line_buffering=fd == 2 or (fd == 1 and os.isatty(fd)),
        )  # fmt: skip
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _run_main(argv: list[str], cwd: str, path: list[str]) -> int:
    """Run ``python ARGV``'s main module with ``path`` after its own entry; its exit status."""
    try:
        if argv[0] == "-m":
            sys.path[:] = [cwd, *path]
            sys.argv = ["-m", *argv[2:]]  # runpy puts the module's file first
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.path[:] = ["", *path]
            sys.argv = ["-c", *argv[2:]]
            sys.modules["__main__"] = main = types.ModuleType("__main__")
            exec(compile(argv[1], "<string>", "exec", dont_inherit=True), vars(main))
        else:
            sys.path[:] = [os.path.dirname(os.path.realpath(argv[0])), *path]
            sys.argv = list(argv)
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        return _exit_code(e.code)
    except BaseException as e:
        e.with_traceback(_user_frames(e.__traceback__))
        sys.excepthook(type(e), e, e.__traceback__)
        return -signal.SIGINT if isinstance(e, KeyboardInterrupt) else 1
    return 0


def _user_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """A traceback without the zygote's and runpy's frames, as a fresh interpreter prints it."""
    ours = (_run_main.__code__.co_filename, runpy.run_path.__code__.co_filename)  # <frozen runpy>
    while tb is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    return tb


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
    os._exit(0)  # the interpreter's own end spends seconds in the libraries' destructors
