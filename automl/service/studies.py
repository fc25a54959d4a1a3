"""The study service: the functions that the CLI, the API and the workers all call."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import optuna

from automl.errors import AutomlError, SpecError
from automl.records import (
    CONVERGED_ATTR,
    FAIL_REASON,
    FORGIVEN_ATTR,
    LOST_WORKER,
    REFUSED_ATTR,
    SPEC_ATTR,
    STOP_ATTR,
    violated,
)
from automl.search.budget import (
    count_states,
    first_start,
    forgiven_failures,
    out_of_time,
    seconds_per_complete,
    study_state,
)
from automl.search.spec import StudySpec, parse_spec
from automl.storage.capabilities import count_states as count_trial_states
from automl.storage.capabilities import stale_trial_ids

if TYPE_CHECKING:
    from optuna.storages import BaseStorage


class StudyNotFound(AutomlError, KeyError):
    """No study of that name exists in the storage."""

    def __str__(self) -> str:
        return f"no study named {self.args[0]!r}; `automl study list` shows the existing ones"


class TrialNotFound(AutomlError, KeyError):
    """The study has no such trial, or it has no model."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class StudyInfo:
    """A study as users see it: spec, state and progress."""

    name: str
    spec: dict
    state: str
    counts: dict[str, int]
    n_trials: int | None
    created_at: str | None = None
    eta_s: float | None = None
    failures: list[dict] = field(default_factory=list)
    error: str | None = None  # why the study failed before any trial could run
    converged: str | None = None  # why a serving study ended before n_trials
    stale: list[int] = field(default_factory=list)  # RUNNING trials whose worker has died
    infeasible: dict[str, int] = field(default_factory=dict)  # per constraint: COMPLETE trials

    def as_dict(self) -> dict:
        """Plain JSON-able form."""
        return asdict(self)


def load(name: str, storage: BaseStorage) -> tuple[optuna.Study, StudySpec]:
    """Open an automl study and its spec.

    Raises:
        StudyNotFound: No such study.
    """
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError as e:
        raise StudyNotFound(name) from e
    if SPEC_ATTR not in study.user_attrs:
        raise SpecError(f"study {name!r} exists but was not created by automl")
    return study, parse_spec(study.user_attrs[SPEC_ATTR])


def state_counts(storage: BaseStorage, study_id: int) -> tuple[dict[str, int], datetime | None]:
    """Trials per state name and the first trial's start: one query on our RDB storages."""
    return count_trial_states(storage, study_id)


def retry_failed(name: str, storage: BaseStorage) -> int:
    """Let a study that ended on too many failures run again, e.g. after its data was fixed.

    The failures so far stay recorded as FAIL, but no longer count towards the cap; the
    study's ``failures_forgiven`` user attr records how many.

    Returns:
        The number of failures forgiven.

    Raises:
        StudyNotFound: No such study.
    """
    study, _ = load(name, storage)
    failed = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,)))
    study.set_user_attr(FORGIVEN_ATTR, failed)
    return failed


def get_study(name: str, storage: BaseStorage) -> StudyInfo:
    """Spec, state, counts per trial state, ETA and failures with reasons."""
    study, spec = load(name, storage)
    trials = study.get_trials(deepcopy=False)
    counts = count_states(trials)
    stop_requested = bool(study.user_attrs.get(STOP_ATTR))
    timed_out = out_of_time(spec, first_start(trials))
    forgiven = forgiven_failures(study.user_attrs)
    error = study.user_attrs.get(REFUSED_ATTR)
    converged = study.user_attrs.get(CONVERGED_ATTR)
    state = study_state(
        spec, counts, stop_requested, timed_out, forgiven, error is not None, bool(converged)
    )
    # Optuna's retry callback appends the trial it re-runs to the retry's history.
    retries = {
        t.system_attrs["retry_history"][-1]: t.number
        for t in trials
        if t.system_attrs.get("retry_history")
    }
    failures = [
        {
            "number": t.number,
            "reason": t.user_attrs.get(FAIL_REASON, LOST_WORKER),
            "params": t.params,
            "retried_as": retries.get(t.number),
        }
        for t in trials
        if t.state.name == "FAIL"
    ]
    return StudyInfo(
        name=name,
        spec=spec.model_dump(mode="json"),
        state=state,
        counts=counts,
        n_trials=spec.n_trials,
        created_at=study.user_attrs.get("created_at"),
        eta_s=_eta(trials, spec, counts) if state == "running" else None,
        failures=failures,
        error=error,
        converged=converged,
        stale=_stale(study, trials),
        infeasible=_infeasible(trials, spec),
    )


def _stale(study: optuna.Study, trials: list[optuna.trial.FrozenTrial]) -> list[int]:
    """The numbers of RUNNING trials whose heartbeat has lapsed."""
    if not any(t.state.name == "RUNNING" for t in trials):
        return []
    ids = set(stale_trial_ids(study._storage, study._study_id))
    return [t.number for t in trials if t._trial_id in ids]


def _infeasible(trials: list[optuna.trial.FrozenTrial], spec: StudySpec) -> dict[str, int]:
    """How many COMPLETE trials violate each of the spec's constraints (those none violates
    are left out)."""
    counts: dict[str, int] = {}
    for trial in trials:
        if trial.state.name == "COMPLETE":
            for index in violated(trial.system_attrs):
                if index < len(spec.constraints):
                    name = str(spec.constraints[index])
                    counts[name] = counts.get(name, 0) + 1
    return counts


def refuse_study(study: optuna.Study, reason: str) -> None:
    """Mark ``study`` failed before its trials, for ``reason``: no worker will take it, and
    every view says why. :func:`automl.service.create.create_study` on the same spec (a resume) clears it."""
    study.set_user_attr(REFUSED_ATTR, reason)


def _eta(trials: list[optuna.trial.FrozenTrial], spec: StudySpec, counts: dict) -> float | None:
    per_complete = seconds_per_complete(trials)
    if per_complete is None or spec.n_trials is None:
        return None
    parallel = max(counts["RUNNING"], 1)
    return max(spec.n_trials - counts["COMPLETE"], 0) * per_complete / parallel


def request_stop(name: str, storage: BaseStorage) -> StudySpec:
    """Ask every worker of the study to stop after its running trial.

    Returns:
        The study's spec.

    Raises:
        StudyNotFound: No such study.
    """
    study, spec = load(name, storage)
    study.set_user_attr(STOP_ATTR, True)
    return spec
