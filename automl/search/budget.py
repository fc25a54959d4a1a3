"""The study rules that every process applies alike: when a study is done, stopped, out of
time or failed, and its spec as stored. The service, the scheduler and the study loop all read
them here.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from automl.errors import AutomlError
from automl.records import FORGIVEN_ATTR, SPEC_ATTR, TRIAL_STATES
from automl.search.spec import StudySpec, parse_spec

if TYPE_CHECKING:
    import optuna


def count_states(trials: list[optuna.trial.FrozenTrial]) -> dict[str, int]:
    """Number of trials per state name."""
    counts = dict.fromkeys(TRIAL_STATES, 0)
    for trial in trials:
        counts[trial.state.name] += 1
    return counts


def study_state(
    spec: StudySpec,
    counts: dict[str, int],
    stop_requested: bool,
    timed_out: bool = False,
    forgiven: int = 0,
    refused: bool = False,
    converged: bool = False,
) -> str:
    """queued, running, done, stopped or failed, from the counts, stop flag and time budget.

    ``forgiven`` failures (see :func:`automl.service.studies.retry_failed`) do not count towards the failure cap;
    a ``refused`` study (see :func:`automl.service.studies.refuse_study`) has failed; a
    ``converged`` one (see :mod:`automl.trials.screen`) is done.
    """
    if spec.n_trials is not None and counts["COMPLETE"] >= spec.n_trials:
        return "done"
    if counts["RUNNING"]:
        return "running"
    if stop_requested:
        return "stopped"
    if refused or counts["FAIL"] >= fail_cap(spec, forgiven):
        return "failed"
    return "done" if timed_out or converged else "queued"


def seconds_per_complete(trials: list[optuna.trial.FrozenTrial]) -> float | None:
    """Trial time spent per COMPLETE trial so far: the durations of every finished trial (the
    PRUNED and FAIL ones too, such as a serving study's screened trials, which do not count
    towards ``n_trials``) over the COMPLETE ones; ``None`` before the first."""
    complete = sum(t.state.name == "COMPLETE" for t in trials)
    if not complete:
        return None
    ended = [t for t in trials if t.datetime_complete and t.datetime_start]
    return sum((t.datetime_complete - t.datetime_start).total_seconds() for t in ended) / complete


def first_start(trials: list[optuna.trial.FrozenTrial]) -> datetime | None:
    """When the first of ``trials`` started; None when none has."""
    return min((t.datetime_start for t in trials if t.datetime_start is not None), default=None)


def out_of_time(spec: StudySpec, started: datetime | None) -> bool:
    """Whether ``timeout_s`` has passed since ``started``, the study's first trial's start."""
    if spec.timeout_s is None or started is None:
        return False
    return (datetime.now() - started).total_seconds() >= spec.timeout_s


def fail_cap(spec: StudySpec, forgiven: int = 0) -> int:
    """How many failed trials end a study: a space that keeps failing must not spin forever.

    Args:
        spec: The study's spec.
        forgiven: Failures before the last :func:`automl.service.studies.retry_failed`, which no longer count.
    """
    return max(2 * (spec.n_trials or 0), 10) + forgiven


def forgiven_failures(user_attrs: dict) -> int:
    """How many failures of a study :func:`automl.service.studies.retry_failed` has forgiven (its user attrs)."""
    return int(user_attrs.get(FORGIVEN_ATTR, 0))


def readable_spec(user_attrs: dict) -> StudySpec | None:
    """The automl spec in a study's user attrs, or None.

    None for a study automl did not create, and for a stored spec this version cannot read
    (`automl study show` names the problem).
    """
    if SPEC_ATTR not in user_attrs:
        return None
    try:
        return parse_spec(user_attrs[SPEC_ATTR])
    except AutomlError:
        return None
