"""What our RDB storage does in one query or one transaction, behind one declared interface.

:class:`BatchedStorage` is the contract; ``HeartbeatRDBStorage`` and its trial cache meet it.
The functions below take any Optuna storage and fall back to Optuna's own API where the
storage does not (in memory, journal), so that callers never probe with ``getattr``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from optuna.storages._heartbeat import BaseHeartbeat, is_heartbeat_enabled
from optuna.trial import TrialState

from automl.records import TRIAL_STATES

if TYPE_CHECKING:
    from datetime import datetime

    from optuna.storages import BaseStorage

_TAKEN = (TrialState.COMPLETE, TrialState.RUNNING)


@runtime_checkable
class BatchedStorage(Protocol):
    """A storage that writes a trial's attrs in one transaction and counts trials in a query.

    Thread safety and ownership are Optuna's ``BaseStorage``'s: a RUNNING trial's attrs are
    written by the process that runs it.
    """

    def set_trial_attrs(
        self, trial_id: int, user_attrs: dict[str, Any], system_attrs: dict[str, Any]
    ) -> None:
        """Set user and system attrs of a trial in one transaction."""

    def count_trials(self, study_id: int) -> tuple[dict[TrialState, int], datetime | None]:
        """Trials per state, and the first trial's start."""

    def count_taken_trials(self, study_id: int, number: int) -> int:
        """COMPLETE trials, and RUNNING ones numbered below ``number``."""


def set_trial_attrs(
    storage: BaseStorage, trial_id: int, user_attrs: dict[str, Any], system_attrs: dict[str, Any]
) -> None:
    """Set a trial's user and system attrs: in one transaction where the storage can."""
    if isinstance(storage, BatchedStorage):
        storage.set_trial_attrs(trial_id, user_attrs, system_attrs)
        return
    for key, value in user_attrs.items():
        storage.set_trial_user_attr(trial_id, key, value)
    for key, value in system_attrs.items():
        storage.set_trial_system_attr(trial_id, key, value)


def count_states(storage: BaseStorage, study_id: int) -> tuple[dict[str, int], datetime | None]:
    """Trials per state name (every state present) and the first trial's start."""
    if isinstance(storage, BatchedStorage):
        by_state, started = storage.count_trials(study_id)
        return dict.fromkeys(TRIAL_STATES, 0) | {s.name: n for s, n in by_state.items()}, started
    trials = storage.get_all_trials(study_id, deepcopy=False)
    counts = dict.fromkeys(TRIAL_STATES, 0)
    for trial in trials:
        counts[trial.state.name] += 1
    starts = [t.datetime_start for t in trials if t.datetime_start is not None]
    return counts, min(starts, default=None)


def count_taken(storage: BaseStorage, study_id: int, number: int) -> int:
    """COMPLETE trials, and RUNNING ones numbered below ``number`` (who is in the budget)."""
    if isinstance(storage, BatchedStorage):
        return storage.count_taken_trials(study_id, number)
    taken = storage.get_all_trials(study_id, deepcopy=False, states=_TAKEN)
    return sum(t.state == TrialState.COMPLETE or t.number < number for t in taken)


def stale_trial_ids(storage: BaseStorage, study_id: int) -> list[int]:
    """The study's RUNNING trials whose heartbeat is older than the grace period: their worker
    has died, and the next reap fails and retries them. Without heartbeats, none."""
    if isinstance(storage, BaseHeartbeat) and is_heartbeat_enabled(storage):
        return storage._get_stale_trial_ids(study_id)
    return []
