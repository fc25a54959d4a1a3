"""Submitting a study from the network side: naming, idempotency and conflicts.

``create_study`` resumes a study of the same name and spec, which suits the CLI. A remote
submission needs stricter rules: a name that is taken is a conflict, unless the submission
repeats the ``Idempotency-Key`` (and spec) that created the study.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import TYPE_CHECKING

import optuna

from automl.errors import AutomlError
from automl.spec import parse_spec
from automl.studies import SPEC_ATTR, create_study

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

    from automl.spec import StudySpec

IDEMPOTENCY_ATTR = "idempotency_key_sha256"


class StudyConflict(AutomlError):
    """The study name is taken by another submission."""


def submit_study(
    spec: StudySpec, storage: BaseStorage, *, name_given: bool, idempotency_key: str | None
) -> tuple[str, bool]:
    """Create a study for a remote submission, or find the one this submission made before.

    Args:
        spec: The validated spec.
        storage: Where studies live.
        name_given: Whether the client chose the name. Otherwise the name is
            ``<space>-<target>-<suffix>``, the suffix derived from the idempotency key (or
            random without one), so that retries with the key map onto the same study.
        idempotency_key: The client's ``Idempotency-Key``, if any.

    Returns:
        The study's name, and whether this call created it.

    Raises:
        StudyConflict: The name is taken by a study that this key did not create, or the
            key is reused with a different spec.
        SpecError: The space, target or dataset is invalid.
    """
    key_hash = hashlib.sha256(idempotency_key.encode()).hexdigest() if idempotency_key else None
    if not name_given:
        suffix = key_hash[:12] if key_hash else uuid.uuid4().hex[:12]
        spec = parse_spec({**spec.model_dump(mode="json"), "name": _auto_name(spec, suffix)})
    name = str(spec.name)
    if _exists(storage, name):
        return _replay(storage, spec, key_hash), False
    try:
        study = create_study(spec, storage)
    except optuna.exceptions.DuplicatedStudyError:
        return _replay(storage, spec, key_hash), False  # a concurrent retry won the race
    if key_hash:
        study.set_user_attr(IDEMPOTENCY_ATTR, key_hash)
    return name, True


def _auto_name(spec: StudySpec, suffix: str) -> str:
    return f"{spec.search_space}-{spec.target}"[:87] + f"-{suffix}"


def _exists(storage: BaseStorage, name: str) -> bool:
    try:
        storage.get_study_id_from_name(name)
    except KeyError:
        return False
    return True


def _replay(storage: BaseStorage, spec: StudySpec, key_hash: str | None) -> str:
    name = str(spec.name)
    attrs = storage.get_study_user_attrs(storage.get_study_id_from_name(name))
    if key_hash is None or attrs.get(IDEMPOTENCY_ATTR) != key_hash:
        raise StudyConflict(
            f"study {name!r} already exists; choose another name, or repeat the "
            "Idempotency-Key of the request that created it"
        )
    if SPEC_ATTR not in attrs or parse_spec(attrs[SPEC_ATTR]) != spec:
        raise StudyConflict(f"Idempotency-Key reused with a different spec for study {name!r}")
    return name
