"""The study queue: workers that find runnable studies in the storage and run them.

A study is runnable here when it is neither stopped, done nor failed, its time budget is not
spent, a trial slot is free, and this machine has its target. A study whose target is absent
stays queued for a worker on the right hardware (``automl worker --target …``).
"""

from __future__ import annotations

import logging
import time
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import optuna

from automl.errors import AutomlError, DiskFull, InputRefused
from automl.fleet.study_loop import run_study_loop, storage_unreachable
from automl.hosts import worker_name
from automl.records import CONVERGED_ATTR, REFUSED_ATTR, STOP_ATTR
from automl.search.budget import fail_cap, forgiven_failures, out_of_time, readable_spec
from automl.service.read import target_present
from automl.service.studies import state_counts
from automl.storage.reaper import reap_stale_trials
from automl.storage.workers import WorkerBeacon
from automl.targets import list_targets

if TYPE_CHECKING:
    from optuna.artifacts import FileSystemArtifactStore
    from optuna.storages import BaseStorage
    from optuna.study import FrozenStudy

    from automl.fleet.study_loop import GracefulStop
    from automl.settings import Settings

logger = logging.getLogger("automl.fleet.scheduler")


@dataclass(frozen=True)
class Scope:
    """Which studies a worker serves: by target and by name (None means any)."""

    targets: frozenset[str] | None = None
    studies: frozenset[str] | None = None

    def admits(self, name: str, target: str) -> bool:
        """Whether a study of this name and target is in scope."""
        return (self.targets is None or target in self.targets) and (
            self.studies is None or name in self.studies
        )


def runnable_studies(storage: BaseStorage, scope: Scope = Scope()) -> list[str]:
    """Names of the studies a worker on this machine can advance now, oldest first."""
    return [s.study_name for s in storage.get_all_studies() if _runnable(s, storage, scope)]


def _runnable(study: FrozenStudy, storage: BaseStorage, scope: Scope) -> bool:
    spec = readable_spec(study.user_attrs)
    ended = (STOP_ATTR, REFUSED_ATTR, CONVERGED_ATTR)
    if spec is None or any(study.user_attrs.get(attr) for attr in ended):
        return False
    try:
        if not scope.admits(study.study_name, spec.target) or not target_present(spec.target):
            return False
    except AutomlError:
        return False  # a target this version does not know; `study show` reports it
    counts, started = state_counts(storage, study._study_id)
    if counts["RUNNING"]:
        reap_stale_trials(optuna.load_study(study_name=study.study_name, storage=storage))
        counts, started = state_counts(storage, study._study_id)
    if counts["FAIL"] >= fail_cap(spec, forgiven_failures(study.user_attrs)):
        return False
    if out_of_time(spec, started):
        return False
    return spec.n_trials is None or counts["COMPLETE"] + counts["RUNNING"] < spec.n_trials


def work(
    storage: BaseStorage,
    *,
    artifact_store: FileSystemArtifactStore,
    settings: Settings,
    stop: GracefulStop,
    scope: Scope = Scope(),
    max_trials: int | None = None,
    exit_when_idle: bool = False,
    poll_s: float = 2.0,
    recheck_s: float = 60.0,
) -> int:
    """Run runnable studies, oldest first, until stopped, out of budget or (optionally) idle.

    Args:
        storage: The shared storage, ideally wrapped with :func:`automl.storage.factory.cached`.
        artifact_store: Where trial models go.
        settings: Cache and related settings.
        stop: Stop flag; the running trial finishes first.
        scope: The targets and studies this worker serves.
        max_trials: Trials this worker runs at most.
        exit_when_idle: Return once no study in scope is runnable, instead of polling.
        poll_s: Wait between looks at an empty queue.
        recheck_s: A study that could not run here (e.g. its space file is missing on this
            host) is skipped for this long, then tried again.

    Returns:
        How many trials this worker ran.

    Raises:
        DiskFull: A trial found this host's disk full, over quota or read-only: this worker
            stops, rather than lose a trial of every other study to it.
    """
    served = scope.targets
    if served is None:
        served = frozenset(t.name for t in list_targets() if target_present(t.name))
    with WorkerBeacon(storage, served, settings.heartbeat_interval_s):
        return _serve(storage, artifact_store, settings, stop, scope, max_trials,
                      exit_when_idle, poll_s, recheck_s)  # fmt: skip


def _serve(
    storage, artifact_store, settings, stop, scope, max_trials, exit_when_idle, poll_s, recheck_s
) -> int:
    """:func:`work`'s loop, while its beacon tells the storage what this worker serves."""
    ran, unusable = 0, {}  # study name: when it could not run here (monotonic s)
    while not stop.requested and (max_trials is None or ran < max_trials):
        name = None
        try:
            now = time.monotonic()
            skipped = {n for n, failed_at in unusable.items() if now - failed_at < recheck_s}
            names = [n for n in runnable_studies(storage, scope) if n not in skipped]
            if names:
                name = names[0]
                result = run_study_loop(
                    name, storage, artifact_store=artifact_store, settings=settings,
                    stop=stop, poll_s=min(poll_s, 1.0), sampler_offset=_worker_offset(),
                    wait=exit_when_idle,  # a polling worker serves other studies meanwhile
                    max_trials=None if max_trials is None else max_trials - ran,
                )  # fmt: skip
                ran += result.ran
                logger.info("study %s: %s trial(s) here, %s", name, result.ran, result.reason)
                continue
            if exit_when_idle:
                break
        except DiskFull:  # the host's disk: every other study's trials would fail on it too
            raise
        except Exception as e:
            if name is not None and not storage_unreachable(e):
                # Other studies must not wait on this one, nor die with it.
                unusable[name] = time.monotonic()
                _set_aside(name, e, recheck_s)
                continue
            if not isinstance(e, AutomlError) and not storage_unreachable(e):
                raise
            logger.warning("worker: %s; retrying in %.0f s", e, poll_s)
        _sleep(poll_s, stop)
    return ran


def _set_aside(name: str, error: Exception, recheck_s: float) -> None:
    """Log why study ``name`` stopped running here: refused (for good), not runnable on this
    host (e.g. its search space file is not here), or an error of automl's own (a bug: its
    traceback is logged for the operator)."""
    if isinstance(error, InputRefused):
        logger.error("study %s refused: %s", name, error)
    elif isinstance(error, AutomlError):
        logger.error(
            "study %s cannot run on this worker, skipped for %.0f s: %s", name, recheck_s, error
        )
    else:
        logger.error(
            "study %s: unexpected %s, skipped for %.0f s; the worker serves the other studies",
            name, type(error).__name__, recheck_s, exc_info=error,
        )  # fmt: skip


def _worker_offset() -> int:
    """A sampler seed offset of this process: workers started together must not draw alike."""
    return zlib.crc32(worker_name().encode()) % 1_000_003


def _sleep(seconds: float, stop: GracefulStop) -> None:
    deadline = time.monotonic() + seconds
    while not stop.requested and time.monotonic() < deadline:
        time.sleep(0.1)
