"""Reaping the trials of dead workers: RUNNING trials whose heartbeat went stale are failed.

They are then retried per the storage's callback (see :func:`automl.storage.factory.open_storage`).
Workers reap before they wait on other workers' trials, and the API process runs a
:class:`Reaper` thread, so that stale trials are failed even when no worker starts new ones.
"""

from __future__ import annotations

import logging
import threading
import warnings
from typing import TYPE_CHECKING

import optuna
from optuna.trial import TrialState

from automl.records import SPEC_ATTR

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

logger = logging.getLogger("automl.storage.reaper")


def reap_stale_trials(study: optuna.Study) -> None:
    """Fail RUNNING trials whose heartbeat is stale (a no-op without heartbeats).

    They are retried per the storage's callback. Trials get their first heartbeat when they are
    created (see :class:`automl.storage.rdb.HeartbeatRDBStorage`), so this covers workers that died
    at any point of a trial.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def reap_all(storage: BaseStorage) -> int:
    """Fail the stale RUNNING trials of every automl study (retried per the storage's callback).

    Returns:
        How many trials were failed.
    """
    failed = 0
    for study in storage.get_all_studies():
        if SPEC_ATTR not in study.user_attrs:
            continue  # not an automl study: its trials are someone else's
        trials = storage.get_all_trials(
            study._study_id, deepcopy=False, states=(TrialState.RUNNING,)
        )
        if not trials:
            continue
        reap_stale_trials(optuna.load_study(study_name=study.study_name, storage=storage))
        still = storage.get_all_trials(
            study._study_id, deepcopy=False, states=(TrialState.RUNNING,)
        )
        failed += len(trials) - len(still)
    return failed


class Reaper:
    """A daemon thread that runs :func:`reap_all` every ``interval_s`` (for the API process)."""

    def __init__(self, storage: BaseStorage, interval_s: float) -> None:
        self._storage = storage
        self._interval_s = interval_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="automl-reaper", daemon=True)

    def start(self) -> Reaper:
        """Start reaping."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the current pass."""
        self._stopped.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            try:
                reaped = reap_all(self._storage)
            except Exception:  # a storage outage, or worse: the next pass tries again
                logger.exception("reaper: pass failed")
                continue
            if reaped:
                logger.warning("reaper: failed %d stale trial(s) of dead workers", reaped)
