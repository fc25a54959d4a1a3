"""Read-side queries for the API and the worker queue: pages, trial details, cached fronts.

A long-lived process (the API, a queue worker) should wrap its storage once with
:func:`automl.storage.factory.cached` so that finished trials are read from the database only once.
"""

from __future__ import annotations

import functools
import gc
import math
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import optuna

from automl.records import ARTIFACT_ID, BASELINE, TIMED_METRICS, TrialRecord, violated
from automl.search.budget import readable_spec
from automl.service.studies import StudyInfo, StudyNotFound, TrialNotFound, get_study, load
from automl.targets import is_present, load_target

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence
    from datetime import datetime

    from optuna.storages import BaseStorage

    from automl.search.objectives import Objective
    from automl.search.spec import StudySpec

_DETAIL_ATTRS = (
    "timings", "latency", "latency_source", "candidate", "env", "preprocessing", "quantization",
)  # fmt: skip


@functools.cache
def target_present(name: str) -> bool:
    """Whether this machine has target ``name``'s hardware (asked once per process)."""
    return is_present(load_target(name))


def waiting_reason(info: StudyInfo, serving: frozenset[str]) -> str | None:
    """Why a queued study has not started, or ``None`` when it is not queued.

    Args:
        info: The study.
        serving: The targets that live workers of the storage serve (see
            :func:`automl.storage.workers.live_targets`), not this host's hardware.
    """
    if info.state != "queued":
        return None
    target = info.spec["target"]
    if target not in serving:
        return (
            f"no live worker serves target {target!r}; start "
            f"`automl worker --target {target} --storage <shared URL>` on a machine that has it"
        )
    return f"waiting for a free worker with target {target!r}"


def list_studies(storage: BaseStorage) -> list[StudyInfo]:
    """Every automl study in the storage, oldest first (the CLI's list; the API pages it)."""
    return study_page(storage, offset=0, limit=None)[1]


def study_page(
    storage: BaseStorage, *, offset: int, limit: int | None
) -> tuple[int, list[StudyInfo]]:
    """One page of automl studies, oldest first, and the total number of them."""
    names = [s.study_name for s in storage.get_all_studies() if readable_spec(s.user_attrs)]
    end = None if limit is None else offset + limit
    return len(names), [get_study(name, storage) for name in names[offset:end]]


def study_trials(
    name: str, storage: BaseStorage, *, state: str | None = None
) -> tuple[StudySpec, list[TrialRecord]]:
    """Every trial of study ``name`` by number (optionally of one state), read as REST's
    ``GET /v1/studies/{name}/trials`` reads its pages, and the study's spec.

    Raises:
        StudyNotFound: No such study.
    """
    snapshots = StudySnapshots()
    records = snapshots.trial_page(name, storage, state=state, offset=0, limit=None)[1]
    return snapshots.front(name, storage).spec, records


def trial_detail(name: str, storage: BaseStorage, number: int) -> dict:
    """Everything recorded about one trial: metrics, stage timings, failure reason, timing.

    Raises:
        StudyNotFound: No such study.
        TrialNotFound: The study has no trial ``number``.
    """
    study, spec = load(name, storage)
    trial = _trial(study, name, number)
    front = {r.number for r in front_records(study, spec) if r.on_front}
    return {
        **trial_record(trial, spec, front),
        **{key: trial.user_attrs.get(key) for key in _DETAIL_ATTRS},
        "constraints": trial.constraints,
        # Optuna stores naive local times; an explicit offset makes them RFC 3339 date-times.
        "datetime_start": _aware(trial.datetime_start),
        "datetime_complete": _aware(trial.datetime_complete),
        "duration_s": trial.duration.total_seconds() if trial.duration else None,
    }


def _aware(moment: datetime | None) -> datetime | None:
    return moment.astimezone() if moment is not None else None


def model_trial(
    name: str, storage: BaseStorage, number: int
) -> tuple[optuna.trial.FrozenTrial, StudySpec]:
    """Trial ``number``, which has a model, and its study's spec; the trial alone is read.

    Raises:
        StudyNotFound: No such study.
        TrialNotFound: No such trial, or it has no model (it did not complete).
    """
    study, spec = load(name, storage)
    trial = _trial(study, name, number)
    if ARTIFACT_ID not in trial.user_attrs:
        raise TrialNotFound(f"trial {number} of study {name!r} has no model")
    return trial, spec


def _trial(study: optuna.Study, name: str, number: int) -> optuna.trial.FrozenTrial:
    try:
        trial_id = study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    except KeyError as e:
        raise TrialNotFound(f"study {name!r} has no trial {number}") from e
    return study._storage.get_trial(trial_id)


def pareto_front(name: str, storage: BaseStorage) -> list[TrialRecord]:
    """The non-dominated feasible trials with objective values, params and metrics."""
    return front_records(*load(name, storage))


def empty_front_reason(name: str, storage: BaseStorage) -> str:
    """Why study ``name`` has no Pareto trial, and what to do about it.

    Either no trial has completed, or every complete one breaks a constraint: then each
    constraint that some trial breaks is named with the closest value those trials reached.
    """
    study, spec = load(name, storage)
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    failed = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,)))
    if not done:
        why = f"; {failed} failed: `automl study show {name}` says why" if failed else ""
        return f"study {name!r} has no complete trial yet{why}"
    broken = []
    for index, constraint in enumerate(spec.constraints):
        breaking = [t for t in done if index in violated(t.system_attrs)]
        if not breaking:
            continue
        values = [
            t.user_attrs[constraint.metric] for t in breaking if constraint.metric in t.user_attrs
        ]
        reached = ""
        if values:
            closest = min(values) if constraint.op == "<=" else max(values)
            reached = f"; the closest of them reached {closest:.4g}"
        broken.append(f"{constraint} (broken by {len(breaking)}{reached})")
    return (
        f"no trial of study {name!r} meets its constraints: each of its {len(done)} complete "
        f"trial(s) breaks one of {'; '.join(broken)}. A study keeps its constraints: loosen "
        f"them in a new study (e.g. --name {name}-2)"
    )


def front_records(study: optuna.Study, spec: StudySpec) -> list[TrialRecord]:
    """The study's front as records, by number: the one way the CLI, the API, the report and
    exports read a front.

    It is ``study.best_trials`` (feasible and non-dominated), less the trials on it only
    through noise: a trial that another front trial beats on some objective and ties on the
    rest, latencies within their measurements' noise counting as ties (see
    :func:`shown_front`), is left out, and the record that beats it names it in ``ties``.
    Optuna's own front (the dashboard's) keeps it.

    A trained model's study adds its baseline trial, marked ``baseline``, even where it is
    dominated; ``on_front`` tells the front's own records from it.
    """
    best = study.best_trials
    ties = shown_front(best, spec.objectives)
    trials = {t.number: t for t in best if t.number in ties}
    if spec.model is not None:
        complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        trials.update({t.number: t for t in complete if t.user_attrs.get(BASELINE)})
    return [
        TrialRecord.of(trials[n], spec.metric_names, on_front=n in ties, ties=ties.get(n, ()))
        for n in sorted(trials)
    ]


def shown_front(
    front: Sequence[optuna.trial.FrozenTrial], objectives: Sequence[Objective]
) -> dict[int, tuple[int, ...]]:
    """The trials of Optuna's ``front`` that automl shows, each with those it displaces.

    Trial ``b`` displaces trial ``a`` when ``b`` is no worse on every objective and better on
    one, where two values of a timed metric (:data:`automl.records.TIMED_METRICS`) whose
    relative difference is within the larger noise of the two measurements
    (:func:`latency_noise`) count as equal. Only a trial that nothing still shown displaces
    displaces others, so that a chain of ties within noise does not remove a real difference.
    """
    beaten_by = {a.number: [b.number for b in front if _displaces(b, a, objectives)] for a in front}
    ties: dict[int, list[int]] = {n: [] for n in beaten_by}
    while True:
        sure = {n for n in ties if not any(b in ties for b in beaten_by[n])}
        displaced = {
            n: next(b for b in beaten_by[n] if b in sure)
            for n in set(ties) - sure
            if any(b in sure for b in beaten_by[n])
        }
        if not displaced:
            return {n: tuple(sorted(shown)) for n, shown in ties.items()}
        for n, by in displaced.items():
            ties[by] += [n, *ties.pop(n)]


def latency_noise(trial: optuna.trial.FrozenTrial) -> float:
    """The relative noise of a trial's latency: the half-width of the 95 % confidence interval
    of its median over the median (``ci_rel``); 0 where it recorded none."""
    noise = (trial.user_attrs.get("latency") or {}).get("ci_rel")
    return float(noise) if noise is not None and math.isfinite(noise) else 0.0


def _displaces(
    b: optuna.trial.FrozenTrial, a: optuna.trial.FrozenTrial, objectives: Sequence[Objective]
) -> bool:
    """Whether ``b`` is no worse than ``a`` on every objective and better on one, timed
    metrics tied within noise."""
    noise = max(latency_noise(a), latency_noise(b))
    better = False
    for objective, va, vb in zip(objectives, a.values, b.values, strict=True):
        tied = objective.metric in TIMED_METRICS and abs(va - vb) <= noise * max(abs(va), abs(vb))
        if va == vb or tied:
            continue
        if (vb < va) != (objective.direction == "minimize"):
            return False
        better = True
    return better


def trial_record(
    trial: optuna.trial.FrozenTrial, spec: StudySpec, front: Collection[int]
) -> TrialRecord:
    """A trial as a :class:`~automl.records.TrialRecord` of ``spec``'s study, whose front
    holds the trial numbers ``front``."""
    return TrialRecord.of(trial, spec.metric_names, on_front=trial.number in front)


@dataclass(frozen=True)
class Front:
    """A study's Pareto front; ``key`` (study id, COMPLETE count) changes whenever it may."""

    key: tuple[int, int]
    spec: StudySpec
    trials: list[TrialRecord]


@dataclass
class _Snapshot:
    """One study as of ``checked``: its spec, trials by number and state, and its front."""

    spec: StudySpec
    trials: list[optuna.trial.FrozenTrial]
    by_state: dict[str, list[optuna.trial.FrozenTrial]]
    front: Front
    checked: float


class StudySnapshots:
    """Per-study snapshots of the trial list and the Pareto front, for pages and fronts.

    A snapshot is re-read at most every ``check_s`` seconds, which bounds how stale a page or
    a front can be. While one thread re-reads it, the others keep serving the old snapshot.
    The front is recomputed only when the number of COMPLETE trials changes (only a trial
    that completes can change it), with Optuna's sort-based sweep: O(n log n) for two
    objectives, never a pairwise comparison of all trials. Thread-safe.

    Thousands of cached trials are millions of long-lived objects, and each full collection
    of the cyclic garbage collector scans them all (200-300 ms pauses at 10,000 trials). So
    after reads that added ``freeze_after`` trials, what is alive moves to the collector's
    permanent generation (``gc.freeze``); reference counting still frees it.
    """

    def __init__(self, check_s: float = 0.5, freeze_after: int = 1000) -> None:
        self.check_s = check_s
        self.freeze_after = freeze_after
        self._unfrozen = 0
        self._snapshots: dict[str, _Snapshot] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def front(self, name: str, storage: BaseStorage) -> Front:
        """The study's non-dominated feasible trial records, by number.

        Raises:
            StudyNotFound: No such study.
        """
        return self._get(name, storage).front

    def fresh_front(self, name: str) -> Front | None:
        """The cached front if it is fresh, without touching the storage; else ``None``."""
        snapshot = self._snapshots.get(name)
        if snapshot is None or time.monotonic() - snapshot.checked >= self.check_s:
            return None
        return snapshot.front

    def forget(self, name: str) -> None:
        """Drop study ``name``'s snapshot, once the study is deleted: a new study of that name
        is read afresh."""
        self._snapshots.pop(name, None)

    def trial_page(
        self, name: str, storage: BaseStorage, *, state: str | None, offset: int, limit: int | None
    ) -> tuple[int, list[TrialRecord]]:
        """One page of trial records by number, optionally of one state, and their total;
        ``limit=None`` takes every trial from ``offset`` on.

        Raises:
            StudyNotFound: No such study.
        """
        snapshot = self._get(name, storage)
        trials = snapshot.trials if state is None else snapshot.by_state.get(state, [])
        page = trials[offset : None if limit is None else offset + limit]
        front = {r.number for r in snapshot.front.trials if r.on_front}
        return len(trials), [trial_record(t, snapshot.spec, front) for t in page]

    def _get(self, name: str, storage: BaseStorage) -> _Snapshot:
        snapshot = self._snapshots.get(name)
        if snapshot is not None and time.monotonic() - snapshot.checked < self.check_s:
            return snapshot
        lock = self._lock(name)
        if not lock.acquire(blocking=snapshot is None):
            return snapshot  # another thread is re-reading it; the old one is fresh enough
        try:
            snapshot = self._snapshots[name] = self._read(name, storage, self._snapshots.get(name))
        except StudyNotFound:
            self._snapshots.pop(name, None)
            raise
        finally:
            lock.release()
        return snapshot

    def _lock(self, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(name, threading.Lock())

    def _read(self, name: str, storage: BaseStorage, old: _Snapshot | None) -> _Snapshot:
        study, spec = load(name, storage)
        trials = study.get_trials(deepcopy=False)
        self._unfrozen += max(len(trials) - (len(old.trials) if old else 0), 0)
        if self._unfrozen >= self.freeze_after:
            self._unfrozen = 0
            gc.freeze()
        by_state: dict[str, list[optuna.trial.FrozenTrial]] = {}
        for trial in trials:
            by_state.setdefault(trial.state.name, []).append(trial)
        key = (study._study_id, len(by_state.get("COMPLETE", [])))
        front = old.front if old is not None else None
        if front is None or front.key != key:
            front = Front(key, spec, front_records(study, spec))
        return _Snapshot(spec, trials, by_state, front, time.monotonic())
