"""``python ARGV`` in a process forked from the test suite's zygote (see tests/zygote.py), as if
this process had run it: ``python zygote_client.py ARGV``.

The command runs in this folder and environment, on this process's stdin, stdout and stderr;
SIGINT and SIGTERM sent here are passed on to it, and this process exits as it exits (a death by
a signal is the same signal's). Where ``ZYGOTE_SOCKET`` is unset, or the zygote answers that a
fork would not run the command as a fresh interpreter does, the command is exec'd instead.
Standard library only: this process starts for every command.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from typing import BinaryIO, NoReturn

SOCKET_VARIABLE = "ZYGOTE_SOCKET"
FORWARDED = (signal.SIGINT, signal.SIGTERM)


class _Forwarder:
    """Passes SIGINT and SIGTERM on to the command, once its pid is known."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.pending: list[int] = []
        for signum in FORWARDED:
            signal.signal(signum, self._forward)

    def start(self, pid: int) -> None:
        self.pid = pid
        for signum in self.pending:
            os.kill(pid, signum)

    def _forward(self, signum: int, _frame: object) -> None:
        if self.pid is None:
            self.pending.append(signum)
        else:
            os.kill(self.pid, signum)


def run(argv: list[str], fresh: list[str]) -> NoReturn:
    """Run ``python *argv`` through the zygote and exit as it does; exec ``fresh`` (the same
    command, in a fresh process) where ``ZYGOTE_SOCKET`` is unset.

    Args:
        argv: what follows ``python``: ``-m MODULE ARGS``, ``-c CODE ARGS`` or ``SCRIPT ARGS``.
        fresh: the command line to exec without a zygote.
    """
    path = os.environ.get(SOCKET_VARIABLE)
    if not path:
        os.execvp(fresh[0], fresh)
    forwarder = _Forwarder()
    with socket.socket(socket.AF_UNIX) as connection:
        try:
            connection.connect(path)
        except OSError as e:
            sys.exit(f"zygote_client: no zygote answers at {path} ({e}); unset {SOCKET_VARIABLE}")
        request = {"python": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
        data = json.dumps(request).encode() + b"\n"
        connection.sendall(data[socket.send_fds(connection, [data], [0, 1, 2]) :])
        answers = connection.makefile("rb")
        first = _answer(answers, path)
        if "fresh" in first:
            os.execv(first["fresh"], [first["fresh"], *argv])
        forwarder.start(first["pid"])
        _exit_as(_answer(answers, path)["returncode"])


def _answer(answers: BinaryIO, path: str) -> dict:
    line = answers.readline()
    if not line:
        sys.exit(f"zygote_client: the zygote at {path} hung up before the command's exit status")
    return json.loads(line)


def _exit_as(returncode: int) -> NoReturn:
    """Exit with ``returncode``; a negative one is a death by that signal, raised here again."""
    if returncode < 0:
        signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
        returncode = 128 - returncode  # a signal that does not end a process
    sys.exit(returncode)


if __name__ == "__main__":
    run(sys.argv[1:], fresh=[sys.executable, *sys.argv[1:]])
