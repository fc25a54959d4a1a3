"""The study queue: workers that find runnable studies in the storage and run them.

A study is runnable here when it is neither stopped, done nor failed, its time budget is not
spent, a trial slot is free, and this machine has its target. A study whose target is absent
stays queued for a worker on the right hardware (``automl worker --target …``).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy.exc import SQLAlchemyError

from automl.errors import AutomlError
from automl.queries import target_present
from automl.spec import parse_spec
from automl.studies import SPEC_ATTR, STOP_ATTR, count_states, fail_cap
from automl.worker import run_study_loop

if TYPE_CHECKING:
    from optuna.artifacts import FileSystemArtifactStore
    from optuna.storages import BaseStorage
    from optuna.study import FrozenStudy

    from automl.settings import Settings
    from automl.worker import GracefulStop

logger = logging.getLogger("automl.queue")


def runnable_studies(storage: BaseStorage) -> list[str]:
    """Names of the studies a worker on this machine can advance now, oldest first."""
    return [s.study_name for s in storage.get_all_studies() if _runnable(s, storage)]


def _runnable(study: FrozenStudy, storage: BaseStorage) -> bool:
    attrs = study.user_attrs
    if SPEC_ATTR not in attrs or attrs.get(STOP_ATTR):
        return False
    try:
        spec = parse_spec(attrs[SPEC_ATTR])
        if not target_present(spec.target):
            return False
    except AutomlError:
        return False  # a stored spec this version cannot read; `study show` reports it
    trials = storage.get_all_trials(study._study_id, deepcopy=False)
    counts = count_states(trials)
    if counts["FAIL"] >= fail_cap(spec):
        return False
    if spec.timeout_s is not None:
        started = [t.datetime_start for t in trials if t.datetime_start is not None]
        if started and (datetime.now() - min(started)).total_seconds() >= spec.timeout_s:
            return False
    return spec.n_trials is None or counts["COMPLETE"] + counts["RUNNING"] < spec.n_trials


def work(
    storage: BaseStorage,
    *,
    artifact_store: FileSystemArtifactStore,
    settings: Settings,
    stop: GracefulStop,
    poll_s: float = 2.0,
) -> None:
    """Run runnable studies, oldest first, until ``stop`` is requested.

    Args:
        storage: The shared storage, ideally wrapped with :func:`automl.queries.cached`.
        artifact_store: Where trial models go.
        settings: Data root and related settings.
        stop: Stop flag; the running trial finishes first.
        poll_s: Wait between looks at an empty queue.
    """
    while not stop.requested:
        try:
            names = runnable_studies(storage)
            if names:
                result = run_study_loop(
                    names[0], storage, artifact_store=artifact_store, settings=settings,
                    stop=stop, poll_s=min(poll_s, 1.0),
                )  # fmt: skip
                logger.info("study %s: %s trial(s) here, %s", names[0], result.ran, result.reason)
                continue
        except (AutomlError, SQLAlchemyError) as e:
            logger.warning("worker: %s; retrying in %.0f s", e, poll_s)
        _sleep(poll_s, stop)


def _sleep(seconds: float, stop: GracefulStop) -> None:
    deadline = time.monotonic() + seconds
    while not stop.requested and time.monotonic() < deadline:
        time.sleep(0.1)
