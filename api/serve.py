"""``automl serve``: the REST API under uvicorn plus K local worker processes.

The web process never runs a trial. Its workers are separate processes that take runnable
studies from the storage (see :mod:`automl.fleet.scheduler`), so a study submitted over HTTP runs here
when this machine has its target, and waits for ``automl worker`` elsewhere otherwise.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from automl.errors import SpecError
from automl.settings import get_settings

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from automl.settings import Settings

logger = logging.getLogger("api.serve")
_STARTUP_FAILURE = 3  # uvicorn's exit code when the server could not start
_HOST_UNUSABLE = 3  # a local worker's exit when this host's disk takes no trial's files


def serve_command(
    storage: Annotated[
        str | None, typer.Option("--storage", help="SQLAlchemy URL [env AUTOML_STORAGE].")
    ] = None,
    artifacts_dir: Annotated[
        Path | None,
        typer.Option(
            "--artifacts-dir",
            help="The trials' models [env AUTOML_ARTIFACTS_DIR; else beside a SQLite storage].",
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Bind address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    workers: Annotated[int, typer.Option(help="Local trial worker processes.", min=0)] = 1,
) -> None:
    """Serve the REST API (OpenAPI at /docs) and local trial workers."""
    serve(host=host, port=port, workers=workers, storage_url=storage, artifacts_dir=artifacts_dir)


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    storage_url: str | None = None,
    artifacts_dir: Path | None = None,
    *,
    settings: Settings | None = None,
) -> None:
    """Serve the API and run ``workers`` local trial workers until interrupted.

    Worker ``i`` gets GPU ``i mod N`` of the host's, or of a ``CUDA_VISIBLE_DEVICES`` already
    set (see :mod:`automl.targets.gpus`). This process runs no trial and keeps its environment.

    Args:
        host: Address to bind. Without a configured token only a loopback address is allowed,
            and only in dev mode.
        port: TCP port.
        workers: Local worker processes (0 for an API-only node).
        storage_url: SQLAlchemy URL of the study storage; defaults to ``settings.storage``.
        artifacts_dir: The trials' models; defaults as
            :meth:`automl.settings.Settings.for_command` says (beside a SQLite storage).
        settings: Defaults to :func:`automl.settings.get_settings` (the environment).

    Raises:
        SpecError: No API token is configured and the address is not loopback, or dev mode
            is off; or the storage URL is malformed; or there are workers and the artifacts
            folder cannot be written (each of their trials would fail on it).
    """
    import uvicorn

    from api import create_app
    from api.security import configured_tokens
    from automl.hosts import is_loopback
    from automl.storage.artifacts import require_writable
    from automl.storage.factory import open_storage
    from automl.targets import list_targets
    from automl.targets.gpus import list_gpus, worker_environment
    from automl.targets.presence import serves_any

    settings = (settings or get_settings()).for_command(storage_url, artifacts_dir)
    if not configured_tokens(settings) and not is_loopback(host):
        raise SpecError(
            f"refusing to serve on {host!r} without an API token: set AUTOML_API_TOKENS "
            "or AUTOML_API_TOKEN_FILE (dev mode is for 127.0.0.1 only)"
        )
    if workers:  # before the storage is created, as `automl study start` does
        require_writable(settings.artifacts_dir, "--artifacts-dir (or AUTOML_ARTIFACTS_DIR)")
    url = settings.storage
    app = create_app(settings, storage=open_storage(url, settings))
    gpus = list_gpus() if workers else []
    accepts = serves_any(list_targets())  # a GPU that is no target's model measures nothing
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info"))
    local = LocalWorkers(
        [(url, settings, worker_environment(i, gpus, accepts=accepts)) for i in range(workers)],
        halted=lambda: server.should_exit,  # a Ctrl-C reaches the workers too: none restarts
    )
    app.state.local_workers = local  # for /healthz
    # uvicorn re-raises the signal that stopped it; SIGTERM must still reach `finally`, and a
    # requested stop exits 0, as `automl worker` does (systemd counts 143 as a failure).
    signal.signal(signal.SIGTERM, _stopped)
    try:
        local.start()
        server.run()
    except KeyboardInterrupt:  # Ctrl-C, re-raised by uvicorn once it has shut down
        pass
    finally:
        local.stop()
    if not server.started:  # e.g. the port is taken: uvicorn logged why
        raise SystemExit(_STARTUP_FAILURE)


class LocalWorkers:
    """The worker processes of ``automl serve`` (each runs ``target``, by default
    :func:`worker_process`, on its ``args``); one that dies is started again.

    A worker that was killed or crashed (a non-zero exit code) is restarted; its running trial
    stays RUNNING until its heartbeat lapses, then the reaper fails and retries it. A worker
    that dies within ``crash_loop_s`` of its start more than ``crash_loop_restarts`` times in a
    row is left dead, with the reason in the log above it, and so is one that stopped on a disk
    that takes no trial's files (exit code 3). None is restarted once ``halted()``
    (the server is shutting down: a Ctrl-C reaches every process of the group).
    """

    def __init__(
        self,
        args: list[tuple],
        *,
        target: Callable[..., object] | None = None,
        halted: Callable[[], bool] = lambda: False,
        poll_s: float = 1.0,
        crash_loop_s: float = 30.0,
        crash_loop_restarts: int = 3,
    ) -> None:
        self._args = args
        self._target = target or worker_process
        self._halted = halted
        self._context = multiprocessing.get_context("spawn")
        self._processes: list[multiprocessing.process.BaseProcess | None] = [None] * len(args)
        self._started = [0.0] * len(args)
        self._quick_deaths = [0] * len(args)
        self._poll_s, self._crash_loop_s = poll_s, crash_loop_s
        self._crash_loop_restarts = crash_loop_restarts
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start every worker, and a thread that restarts one that dies."""
        for index in range(len(self._args)):
            self._start(index)
        if self._args:
            threading.Thread(target=self._watch, name="automl-workers", daemon=True).start()

    @property
    def expected(self) -> int:
        """How many workers were started."""
        return len(self._args)

    def live(self) -> int:
        """How many workers run or will be started again: all but those left dead or stopped."""
        with self._lock:
            gone = sum(p is None for p in self._processes)
        return self.expected - gone

    def stop(self) -> None:
        """Stop every worker after its running trial, and wait for them."""
        with self._lock:
            self._stopping.set()
        live = [p for p in self._processes if p is not None]
        logger.warning("stopping %d worker(s) after their running trials", len(live))
        for process in live:
            process.terminate()
        for process in live:
            process.join()

    def _start(self, index: int) -> None:
        process = self._context.Process(
            target=self._target, args=self._args[index], name=f"automl-worker-{index}"
        )
        process.start()
        self._processes[index], self._started[index] = process, time.monotonic()

    def _watch(self) -> None:
        while not self._stopping.wait(self._poll_s):
            with self._lock:
                if self._stopping.is_set() or self._halted():
                    return
                for index, process in enumerate(self._processes):
                    if process is None or process.is_alive():
                        continue
                    try:
                        self._restart(index, process.exitcode)
                    except Exception:  # e.g. no memory for a process: try again, as a death
                        logger.exception("worker %d could not be started again", index)
                        self._started[index] = time.monotonic()

    def _restart(self, index: int, code: int | None) -> None:
        if code == 0:  # a requested stop (a Ctrl-C reaches the whole process group)
            logger.info("worker %d stopped", index)
            self._processes[index] = None
            return
        if code == _HOST_UNUSABLE:  # a new one would lose a trial to the same disk
            logger.error("worker %d stopped: its log above says why; not started again", index)
            self._processes[index] = None
            return
        quick = time.monotonic() - self._started[index] < self._crash_loop_s
        self._quick_deaths[index] = self._quick_deaths[index] + 1 if quick else 0
        if self._quick_deaths[index] > self._crash_loop_restarts:
            logger.error(
                "worker %d exited (code %s) within %.0f s of its start %d times in a row; it is "
                "not started again: its log above says why, and a restart of automl serve "
                "starts it", index, code, self._crash_loop_s, self._quick_deaths[index],
            )  # fmt: skip
            self._processes[index] = None
            return
        logger.warning(
            "worker %d exited unexpectedly (code %s); starting it again. Its running trial, if "
            "any, is failed and retried once its heartbeat lapses", index, code,
        )  # fmt: skip
        self._start(index)


def _stopped(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def worker_process(
    storage_url: str, settings: Settings, environment: Mapping[str, str] | None = None
) -> None:
    """Entry point of one local worker process: run queued studies until SIGINT/SIGTERM.

    Args:
        storage_url: SQLAlchemy URL of the study storage.
        settings: The server's settings (artifacts, cache, heartbeats).
        environment: Variables set first of all, before anything initialises CUDA: the
            worker's GPU (see :func:`automl.targets.gpus.worker_environment`).
    """
    os.environ.update(environment or {})
    from automl.errors import DiskFull
    from automl.fleet.scheduler import work
    from automl.fleet.study_loop import GracefulStop
    from automl.storage.factory import cached, open_artifact_store, open_storage

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("automl").setLevel(logging.INFO)
    try:
        work(
            cached(open_storage(storage_url, settings)),
            artifact_store=open_artifact_store(settings),
            settings=settings,
            stop=GracefulStop().install(),
        )
    except DiskFull as e:
        logger.error("worker: %s", e)
        raise SystemExit(_HOST_UNUSABLE) from None
