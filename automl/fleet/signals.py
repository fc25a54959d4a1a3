"""Stop signals of a process that runs trials: a first one stops after the running trial, a
second one stops it now.

Light on purpose (no Optuna, no torch): a command installs it before its heavy imports, so that
a SIGTERM during them is a requested stop, not a death by the signal (exit 143).
"""

from __future__ import annotations

import _thread
import atexit
import contextlib
import logging
import os
import queue
import signal
import sys
import threading
import time

from automl.errors import Aborted

logger = logging.getLogger("automl.fleet.signals")


class _HandlerLog:
    """The warnings of a signal handler, logged by a thread of their own.

    A handler runs between two bytecodes of the main thread, maybe inside a write to the very
    stream logging writes to, and a second write there raises "reentrant call inside
    BufferedWriter". The handler only queues (``SimpleQueue.put`` is safe there); the thread
    logs, waiting for the main thread's write to end.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._log, name="automl-signal-log", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def put(self, message: str) -> None:
        """Log ``message`` as a warning, from the thread."""
        self._queue.put(message)

    def close(self) -> None:
        """Log what is queued, then end the thread."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(10)
        atexit.unregister(self.close)

    def _log(self) -> None:
        while (message := self._queue.get()) is not None:
            logger.warning(message)


class GracefulStop:
    """SIGINT/SIGTERM ask the loop to stop after the running trial; a second one aborts it.

    A second Ctrl-C aborts, and so does Ctrl-C after a SIGTERM. A second SIGTERM aborts only
    where ``install(sigterm_aborts=True)`` asked for it: a process whose parent passes its
    SIGTERM on also gets the service manager's own (systemd signals the whole group), and
    must not take the two for two requests.

    Signals that arrive during one long C call (loading torch, say) reach the Python handler as
    one call. The C handler writes one byte per signal to the wakeup pipe, so presses are counted
    from it, and a second Ctrl-C is never taken for the first. SIGUSR1 aborts at once: a parent
    passes its abort on to its helper processes that way.

    A handler may run inside a weakref callback or a ``__del__`` (SQLAlchemy has them), where
    Python swallows what it raises. An abort swallowed there is raised again, at once, in the
    code that the callback interrupted.
    """

    def __init__(self) -> None:
        self.requested = False
        self.by: str | None = None  # what requested the stop: "Ctrl-C" or "SIGTERM"
        self.interrupted = False  # by Ctrl-C, not only by SIGTERM
        self.aborted = False
        self.helpers: list[int] = []  # pids told of a stop (SIGTERM) and an abort (SIGUSR1)
        self._trial: tuple[float, float | None] | None = None  # its start, the mean duration
        self._sigint = True
        self._sigterm_aborts = False
        self._calls = 0  # SIGINT handler calls
        self._sigterms = 0  # SIGTERM handler calls
        self._bytes = 0  # SIGINT bytes read from the wakeup pipe
        self._pipe: tuple[int, int, int] | None = None  # read end, write end, previous fd
        self._previous: dict[int, object] = {}
        self._previous_hook = sys.unraisablehook
        self._reraise = False  # a swallowed abort waits to be raised again
        self._log: _HandlerLog | None = None

    def install(self, *, sigint: bool = True, sigterm_aborts: bool = False) -> GracefulStop:
        """Install the handlers (main thread only).

        Args:
            sigint: Handle Ctrl-C; helper processes leave it ignored and follow their parent.
            sigterm_aborts: A second SIGTERM aborts the running trial. Leave it off where a
                parent passes its SIGTERM on to this process.

        Returns:
            This stop.
        """
        self._sigint, self._sigterm_aborts = sigint, sigterm_aborts
        signums = [signal.SIGTERM, signal.SIGUSR1] + ([signal.SIGINT] if sigint else [])
        self._previous = {signum: signal.signal(signum, self._handle) for signum in signums}
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        self._pipe = (read, write, signal.set_wakeup_fd(write, warn_on_full_buffer=False))
        # Optuna logs an aborted trial with the traceback of the KeyboardInterrupt.
        logging.getLogger("optuna.study._optimize").addFilter(self._quiet_after_abort)
        self._previous_hook, sys.unraisablehook = sys.unraisablehook, self._swallowed
        self._log = _HandlerLog()
        return self

    def uninstall(self) -> None:
        """Restore what :meth:`install` replaced."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        if self._pipe is not None:
            read, write, previous_fd = self._pipe
            signal.set_wakeup_fd(previous_fd)
            os.close(read)
            os.close(write)
            self._pipe = None
        logging.getLogger("optuna.study._optimize").removeFilter(self._quiet_after_abort)
        sys.unraisablehook = self._previous_hook
        self.flush()

    def flush(self) -> None:
        """Log the warnings the handlers have queued (a thread logs them: see
        :class:`_HandlerLog`), and end that thread."""
        if self._log is not None:
            self._log.close()
            self._log = None

    def trial_begins(self, mean_s: float | None) -> None:
        """A trial starts now; its study's COMPLETE trials took ``mean_s`` on average (None
        before the first). A stop requested during it says how long it should take."""
        self._trial = (time.monotonic(), mean_s)

    def trial_ends(self) -> None:
        """The trial of :meth:`trial_begins` has ended."""
        self._trial = None

    def _handle(self, signum: int, _frame: object) -> None:
        # Counted first: another signal's handler may run inside this one, at any line.
        self._sigterms += signum == signal.SIGTERM
        if self._reraise:
            self._reraise = False
            raise Aborted
        seen = max(self._calls, self._bytes)
        self._calls += signum == signal.SIGINT
        self._bytes += self._read_wakeups().count(signal.SIGINT)
        presses = max(self._calls, self._bytes) - seen  # not yet acted on
        if presses:
            self.interrupted = True
        if signum == signal.SIGTERM or presses:
            self._request("Ctrl-C" if presses else "SIGTERM")
        if signum == signal.SIGUSR1 and not self.aborted:  # the parent may tell twice
            self._abort("aborting: the parent process was interrupted")
        if presses and (seen + presses >= 2 or self._sigterms):
            again = "second Ctrl-C" if seen + presses >= 2 else "Ctrl-C after SIGTERM"
            self._abort(f"{again}: aborting; the running trial is marked FAIL")
        if signum == signal.SIGTERM and self._sigterms >= 2 and self._sigterm_aborts:
            self._abort("second SIGTERM: aborting; the running trial is marked FAIL")

    def _read_wakeups(self) -> bytes:
        if self._pipe is None:
            return b""
        chunks = []
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self._pipe[0], 512):
                chunks.append(chunk)
        return b"".join(chunks)

    def _request(self, by: str) -> None:
        if self.requested:
            return
        self.requested, self.by = True, by
        self._tell_helpers(signal.SIGTERM)
        if self._trial is None:
            self._warn(f"stop requested by {by}: no trial runs here, exiting")
            return
        self._warn(
            f"stop requested by {by}: finishing the running trial, then exiting. "
            f"{self._expected()}{self._again(by)}"
        )

    def _expected(self) -> str:
        """How long the running trial has run, and should still run, as a sentence."""
        assert self._trial is not None
        started, mean_s = self._trial
        ran = f"It has run {time.monotonic() - started:.0f} s"
        if mean_s is None:
            return f"{ran}; how long it takes is unknown: no trial of this study has completed yet."
        left = mean_s - (time.monotonic() - started)
        if left <= 0:
            return f"{ran}, longer than the {mean_s:.0f} s its study's complete trials took on average."
        return (
            f"{ran}, and its study's complete trials took {mean_s:.0f} s on average: about "
            f"{left:.0f} s more."
        )

    def _again(self, by: str) -> str:
        """What stops the running trial now, after a stop requested ``by``."""
        if by == "Ctrl-C":
            return " Ctrl-C again stops it now (it is marked FAIL)."
        if self._sigterm_aborts:
            again = "A second SIGTERM" + (" (or Ctrl-C)" if self._sigint else "")
            return f" {again} stops it now (it is marked FAIL)."
        return " Ctrl-C stops it now (it is marked FAIL)." if self._sigint else ""

    def _abort(self, message: str) -> None:
        self.aborted = True
        self._tell_helpers(signal.SIGUSR1)
        self._warn(message)
        raise Aborted

    def _warn(self, message: str) -> None:
        if self._log is None:  # not installed: called from a test, not a handler
            logger.warning(message)
        else:
            self._log.put(message)

    def _swallowed(self, unraisable: sys.UnraisableHookArgs) -> None:
        if not isinstance(unraisable.exc_value, Aborted):
            self._previous_hook(unraisable)
            return
        # Raising here would be swallowed too: a thread trips the handler once this returns.
        self._reraise = True
        timer = threading.Timer(0.01, _thread.interrupt_main, (signal.SIGUSR1,))
        timer.daemon = True
        timer.start()

    def _tell_helpers(self, signum: int) -> None:
        for pid in self.helpers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _quiet_after_abort(self, _record: logging.LogRecord) -> bool:
        return not self.aborted
