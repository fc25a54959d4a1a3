"""Submitting a study from the network side: naming, idempotency and conflicts.

``create_study`` resumes a study of the same name and spec, which suits the CLI. A remote
submission needs stricter rules: a name that is taken is a conflict, unless the submission
repeats the ``Idempotency-Key`` and request that created the study; the same key with another
request is refused.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from functools import partial
from typing import TYPE_CHECKING

import optuna

from automl.errors import AutomlError
from automl.records import DATA_ROOT_ATTR, SPEC_ATTR
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.service.preflight import preflight
from automl.storage.idempotency import claim_key, release_key

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from optuna.storages import BaseStorage

    from automl.search.spec import StudySpec

IDEMPOTENCY_ATTR = "idempotency_key_sha256"
_REPLAY_WAIT_S = 10.0  # how long a retry waits for the study its key's first request creates


class StudyConflict(AutomlError):
    """The study name is taken by another submission."""


class KeyReused(AutomlError):
    """An ``Idempotency-Key`` came back with a different request."""


def submit_study(
    spec: StudySpec,
    storage: BaseStorage,
    *,
    name_given: bool,
    idempotency_key: str | None,
    key_ttl_s: float = 24 * 3600,
    data_root: Path | None = None,
    checks: Sequence[Callable[[StudySpec], object]] = (),
) -> tuple[str, bool]:
    """Create a study for a remote submission, or find the one this submission made before.

    With a key, the key is claimed (with a hash of the request) before the study is created,
    so that concurrent retries replay instead of conflicting (see :mod:`automl.storage.idempotency`).

    Args:
        spec: The validated spec.
        storage: Where studies live.
        name_given: Whether the client chose the name. Otherwise the name is
            ``<space>-<target>-<suffix>``, the suffix derived from the idempotency key (or
            random without one), so that retries with the key map onto the same study.
        idempotency_key: The client's ``Idempotency-Key``, if any.
        key_ttl_s: How long a key is remembered.
        data_root: The folder the spec's files must lie under, when the workers read them
            too (a link swapped after the submission is refused there).
        checks: What must pass before the study is created (see
            :func:`automl.service.preflight.preflight`), such as the trained model's check.

    Returns:
        The study's name, and whether this call created it.

    Raises:
        StudyConflict: The name is taken by a study that this key did not create.
        KeyReused: The key came before with a different request.
        SpecError: The space, target or dataset is invalid.
    """
    submit = partial(
        _submit, storage=storage, name_given=name_given, idempotency_key=idempotency_key,
        key_ttl_s=key_ttl_s, data_root=data_root,
    )  # fmt: skip
    [outcome] = preflight([spec], checks, submit)
    return outcome


def _submit(
    spec: StudySpec,
    *,
    storage: BaseStorage,
    name_given: bool,
    idempotency_key: str | None,
    key_ttl_s: float,
    data_root: Path | None,
) -> tuple[str, bool]:
    """:func:`submit_study` once its checks have passed."""
    key_hash = _sha256(idempotency_key) if idempotency_key else None
    if not name_given:
        suffix = key_hash[:12] if key_hash else uuid.uuid4().hex[:12]
        spec = parse_spec({**spec.model_dump(mode="json"), "name": _auto_name(spec, suffix)})
    if key_hash is None:
        return _create(spec, storage, None, data_root), True
    request_hash = _sha256(json.dumps(spec.model_dump(mode="json"), sort_keys=True))
    claim = claim_key(storage, key_hash, request_hash, str(spec.name), key_ttl_s)
    if not claim.new:
        if claim.request_sha256 != request_hash:
            raise KeyReused(
                f"Idempotency-Key {idempotency_key!r} was used with a different request "
                f"(study {claim.study_name!r}); send a new key for a new request"
            )
        return _wait_for(storage, claim.study_name, key_hash), False
    try:
        return _create(spec, storage, key_hash, data_root), True
    except BaseException:
        release_key(storage, key_hash)
        raise


def _create(
    spec: StudySpec, storage: BaseStorage, key_hash: str | None, data_root: Path | None
) -> str:
    """Create the study and record its key and data root; a taken name is a conflict."""
    name = str(spec.name)
    try:
        extra = {DATA_ROOT_ATTR: str(data_root.resolve())} if data_root is not None else {}
        study = create_study(spec, storage, resume=False, attrs=extra)
    except optuna.exceptions.DuplicatedStudyError:
        study = None
    if study is None:
        if _replays(storage, spec, key_hash):  # the key's claim expired, its study stayed
            return name
        raise StudyConflict(
            f"study {name!r} already exists; choose another name, or repeat the "
            "Idempotency-Key of the request that created it"
        )
    if key_hash:
        study.set_user_attr(IDEMPOTENCY_ATTR, key_hash)
    return name


def _replays(storage: BaseStorage, spec: StudySpec, key_hash: str | None) -> bool:
    """Whether the existing study of ``spec``'s name was created by this key and spec."""
    attrs = storage.get_study_user_attrs(storage.get_study_id_from_name(str(spec.name)))
    return (
        key_hash is not None
        and attrs.get(IDEMPOTENCY_ATTR) == key_hash
        and SPEC_ATTR in attrs
        and parse_spec(attrs[SPEC_ATTR]) == spec
    )


def _wait_for(storage: BaseStorage, name: str, key_hash: str) -> str:
    """The study that the key's first request creates, once that request has finished it."""
    deadline = time.monotonic() + _REPLAY_WAIT_S
    while not _created_by(storage, name, key_hash):
        if time.monotonic() > deadline:
            raise StudyConflict(
                f"the request that first used this Idempotency-Key has not created study "
                f"{name!r} yet; retry in a few seconds"
            )
        time.sleep(0.05)
    return name


def _created_by(storage: BaseStorage, name: str, key_hash: str) -> bool:
    try:
        attrs = storage.get_study_user_attrs(storage.get_study_id_from_name(name))
    except KeyError:
        return False
    return attrs.get(IDEMPOTENCY_ATTR) == key_hash


def _auto_name(spec: StudySpec, suffix: str) -> str:
    return f"{spec.search_space}-{spec.target}"[:87] + f"-{suffix}"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
