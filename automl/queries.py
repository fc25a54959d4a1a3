"""Read-side queries for the API and the worker queue: pages, trial details, cached fronts.

A long-lived process (the API, a queue worker) should wrap its storage once with
:func:`cached` so that finished trials are read from the database only once.
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

import optuna
from optuna.trial import TrialState

from automl.objective import ARTIFACT_ID
from automl.studies import SPEC_ATTR, StudyInfo, TrialNotFound, get_study, load, trial_record
from automl.targets import is_present, load_target

if TYPE_CHECKING:
    from optuna.artifacts import FileSystemArtifactStore
    from optuna.storages import BaseStorage

    from automl.spec import StudySpec

_DETAIL_ATTRS = ("timings", "latency", "latency_source", "candidate", "env", "preprocessing")


def cached(storage: BaseStorage) -> BaseStorage:
    """Wrap an RDB storage in Optuna's trial cache; other storages are returned unchanged.

    Finished trials never change, so the cache reads only new and unfinished trials on each
    call. Keep the returned object for the life of the process.
    """
    return optuna.storages.get_storage(storage)


@functools.cache
def target_present(name: str) -> bool:
    """Whether this machine has target ``name``'s hardware (asked once per process)."""
    return is_present(load_target(name))


def waiting_reason(info: StudyInfo) -> str | None:
    """Why a queued study has not started, or ``None`` when it is not queued."""
    if info.state != "queued":
        return None
    target = info.spec["target"]
    if not target_present(target):
        return (
            f"target {target!r} is not present on this machine; start "
            f"`automl worker --target {target} --storage <shared URL>` on a machine that has it"
        )
    return f"waiting for a free worker with target {target!r}"


def study_page(storage: BaseStorage, *, offset: int, limit: int) -> tuple[int, list[StudyInfo]]:
    """One page of automl studies, oldest first, and the total number of them."""
    names = [s.study_name for s in storage.get_all_studies() if SPEC_ATTR in s.user_attrs]
    return len(names), [get_study(name, storage) for name in names[offset : offset + limit]]


def trial_page(
    name: str, storage: BaseStorage, *, state: str | None, offset: int, limit: int
) -> tuple[int, list[dict]]:
    """One page of a study's trials by number, optionally of one state, and their total.

    Raises:
        StudyNotFound: No such study.
    """
    study, spec = load(name, storage)
    states = None if state is None else (TrialState[state],)
    trials = study.get_trials(deepcopy=False, states=states)
    return len(trials), [trial_record(t, spec) for t in trials[offset : offset + limit]]


def trial_detail(name: str, storage: BaseStorage, number: int) -> dict:
    """Everything recorded about one trial: metrics, stage timings, failure reason, timing.

    Raises:
        StudyNotFound: No such study.
        TrialNotFound: The study has no trial ``number``.
    """
    study, spec = load(name, storage)
    trial = _trial(study, name, number)
    record = trial_record(trial, spec)
    record.update({key: trial.user_attrs.get(key) for key in _DETAIL_ATTRS})
    record["constraints"] = trial.constraints
    record["datetime_start"] = trial.datetime_start
    record["datetime_complete"] = trial.datetime_complete
    record["duration_s"] = trial.duration.total_seconds() if trial.duration else None
    return record


def open_model(
    name: str, storage: BaseStorage, artifact_store: FileSystemArtifactStore, number: int
) -> BinaryIO:
    """Open trial ``number``'s ONNX model for reading; the caller closes it.

    Raises:
        StudyNotFound: No such study.
        TrialNotFound: No such trial, or it has no model (it did not complete).
    """
    study, _ = load(name, storage)
    artifact_id = _trial(study, name, number).user_attrs.get(ARTIFACT_ID)
    if artifact_id is None:
        raise TrialNotFound(f"trial {number} of study {name!r} has no model")
    return artifact_store.open_reader(artifact_id)


def _trial(study: optuna.Study, name: str, number: int) -> optuna.trial.FrozenTrial:
    try:
        trial_id = study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    except KeyError as e:
        raise TrialNotFound(f"study {name!r} has no trial {number}") from e
    return study._storage.get_trial(trial_id)


@dataclass
class _Front:
    key: tuple[int, int]
    records: list[dict]
    spec: StudySpec
    checked: float


class FrontCache:
    """Pareto fronts cached per study, keyed by (study id, number of COMPLETE trials).

    Only a trial that completes can change a front, so a cached front is reused until the
    count moves. The count itself is read at most every ``check_s`` seconds per study, which
    bounds how stale a front can be. Optuna computes a missing front with a sort-based sweep
    (O(n log n) for two objectives). Thread-safe.
    """

    def __init__(self, check_s: float = 0.5) -> None:
        self.check_s = check_s
        self._fronts: dict[str, _Front] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def front(self, name: str, storage: BaseStorage) -> tuple[StudySpec, list[dict]]:
        """The study's spec and its non-dominated feasible trials, by trial number.

        Raises:
            StudyNotFound: No such study.
        """
        entry = self._fronts.get(name)
        if entry is None or time.monotonic() - entry.checked >= self.check_s:
            with self._lock(name):
                entry = self._refresh(name, storage)
        return entry.spec, entry.records

    def _lock(self, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(name, threading.Lock())

    def _refresh(self, name: str, storage: BaseStorage) -> _Front:
        entry = self._fronts.get(name)
        now = time.monotonic()
        if entry is not None and now - entry.checked < self.check_s:
            return entry  # another thread refreshed it while this one waited
        study, spec = load(name, storage)
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        key = (study._study_id, len(complete))
        if entry is None or entry.key != key:
            front = sorted(study.best_trials, key=lambda t: t.number)
            entry = _Front(key, [trial_record(t, spec) for t in front], spec, now)
            self._fronts[name] = entry
        entry.checked = now
        return entry
