"""Deleting a study with the models its trials uploaded: the one function that the CLI's
``automl study delete`` and REST's ``DELETE /v1/studies/{name}`` both call.

A study with RUNNING trials of live workers is refused: its workers would go on writing to a
study that no longer exists. ``automl study stop NAME`` (``POST /v1/studies/{name}/stop``)
lets those trials finish; the delete then goes through. RUNNING trials whose worker has died
(no heartbeat within the grace period) do not hold it up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import optuna
from optuna.artifacts._upload import ARTIFACTS_ATTR_PREFIX
from optuna.artifacts.exceptions import ArtifactNotFound

from automl.errors import AutomlError
from automl.records import ARTIFACT_ID
from automl.service.studies import StudyNotFound, load
from automl.storage.capabilities import stale_trial_ids
from automl.storage.idempotency import release_study_keys

if TYPE_CHECKING:
    from optuna.artifacts import FileSystemArtifactStore
    from optuna.storages import BaseStorage


class StudyRunning(AutomlError):
    """The study has trials that live workers are running."""


@dataclass(frozen=True)
class Deletion:
    """What deleting a study removes, or removed.

    Attributes:
        name: The study.
        trials: How many trials it has, in every state.
        artifacts: The ids of the models (and other files) its trials uploaded.
        missing: Of those, how many were already gone from the artifact store (after a
            delete: before, 0).
    """

    name: str
    trials: int
    artifacts: frozenset[str]
    missing: int = 0


def plan_deletion(name: str, storage: BaseStorage) -> Deletion:
    """What :func:`delete_study` would remove, refused as it would be; it deletes nothing.

    Raises:
        StudyNotFound: No such study.
        SpecError: The study was not created by automl (it is left alone).
        StudyRunning: Live workers are running some of its trials.
    """
    study, _ = load(name, storage)
    trials = study.get_trials(deepcopy=False)
    running = [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    if running:
        stale = set(stale_trial_ids(storage, study._study_id))
        live = [t.number for t in running if t._trial_id not in stale]
        if live:
            raise StudyRunning(
                f"study {name!r} has {len(live)} running trial(s) ({_numbers(live)}); stop it "
                f"first with `automl study stop {name}` (REST: POST /v1/studies/{name}/stop), "
                "and delete it once they have finished"
            )
    ids = {_artifact_ids(t.user_attrs, t.system_attrs) for t in trials}
    ids.add(_artifact_ids({}, storage.get_study_system_attrs(study._study_id)))
    return Deletion(name, len(trials), frozenset().union(*ids))


def delete_study(
    name: str, storage: BaseStorage, artifact_store: FileSystemArtifactStore
) -> Deletion:
    """Delete study ``name``: the models its trials uploaded, then the study and its trials
    from the Optuna storage, then the ``Idempotency-Key`` claims that name it (so that a new
    submission of that name, or a retry of the one that created it, creates it again).

    Models go first: a delete that fails half-way leaves the study in place, and a second
    delete finishes it (a model already gone is counted in ``missing``, not an error).

    Args:
        name: The study.
        storage: The Optuna storage it is in.
        artifact_store: The artifact store its trials uploaded to.

    Returns:
        What was removed.

    Raises:
        StudyNotFound: No such study (or another caller deleted it meanwhile).
        SpecError: The study was not created by automl (it is left alone).
        StudyRunning: Live workers are running some of its trials; nothing is deleted.
    """
    plan = plan_deletion(name, storage)
    missing = 0
    for artifact_id in sorted(plan.artifacts):
        try:
            artifact_store.remove(artifact_id)
        except ArtifactNotFound:
            missing += 1
    try:
        optuna.delete_study(study_name=name, storage=storage)
    except KeyError as e:
        raise StudyNotFound(name) from e
    release_study_keys(storage, name)
    return Deletion(name, plan.trials, plan.artifacts, missing)


def _artifact_ids(user_attrs: dict, system_attrs: dict) -> frozenset[str]:
    """The artifacts a trial (or study) records: its model's ``artifact_id``, and whatever
    Optuna's ``upload_artifact`` recorded (a model uploaded by a trial that then failed)."""
    ids = {user_attrs[ARTIFACT_ID]} if ARTIFACT_ID in user_attrs else set()
    for key, value in system_attrs.items():
        if key.startswith(ARTIFACTS_ATTR_PREFIX):
            ids.add(json.loads(value)["artifact_id"])
    return frozenset(ids)


def _numbers(numbers: list[int], shown: int = 5) -> str:
    more = f", … {len(numbers) - shown} more" if len(numbers) > shown else ""
    return ", ".join(str(n) for n in numbers[:shown]) + more
