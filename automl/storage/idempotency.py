"""Idempotency keys of remote submissions, claimed atomically before the study is created.

A key is claimed by inserting a row whose primary key is the key's SHA-256, with the SHA-256 of
the request it came with and the study it names, in the study storage's own database (table
``automl_idempotency_keys``). Of concurrent requests with one key, exactly one inserts the row
and creates the study; the others find the row and replay, or are refused when their request
differs (see :mod:`automl.storage.tables`). Rows older than the settings'
``idempotency_key_ttl_s`` are deleted, after which the
key may be used again. Storages without a database (Optuna's in-memory one) keep their claims in
the process, which is all such a storage reaches.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import delete, insert, select
from sqlalchemy.exc import IntegrityError

from automl.storage.tables import IDEMPOTENCY_KEYS as KEYS
from automl.storage.tables import engine_of, ensure_tables

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

_local: dict[str, Claim] = {}  # the claims of storages without a database
_lock = threading.Lock()


@dataclass(frozen=True)
class Claim:
    """A key's claim: the request that made it, the study it names, and whether it is new."""

    request_sha256: str
    study_name: str
    new: bool


def claim_key(
    storage: BaseStorage, key_sha256: str, request_sha256: str, study_name: str, ttl_s: float
) -> Claim:
    """Claim ``key_sha256`` for this request, or return the claim another request made.

    Args:
        storage: The study storage; its database holds the claims.
        key_sha256: SHA-256 of the ``Idempotency-Key``.
        request_sha256: SHA-256 of the request, to tell a retry from a reuse.
        study_name: The study this request creates.
        ttl_s: Claims older than this are forgotten first.

    Returns:
        The claim; ``new`` when this call made it.
    """
    engine = engine_of(storage)
    if engine is None:
        return _claim_locally(key_sha256, request_sha256, study_name)
    ensure_tables(engine)
    now = datetime.now(UTC).replace(tzinfo=None)
    with engine.begin() as connection:
        connection.execute(delete(KEYS).where(KEYS.c.created_at < now - timedelta(seconds=ttl_s)))
    row = {"key_sha256": key_sha256, "request_sha256": request_sha256}
    try:
        with engine.begin() as connection:
            connection.execute(insert(KEYS).values(**row, study_name=study_name, created_at=now))
        return Claim(request_sha256, study_name, new=True)
    except IntegrityError:
        with engine.connect() as connection:
            found = connection.execute(
                select(KEYS.c.request_sha256, KEYS.c.study_name).where(
                    KEYS.c.key_sha256 == key_sha256
                )
            ).one()
        return Claim(found.request_sha256, found.study_name, new=False)


def release_key(storage: BaseStorage, key_sha256: str) -> None:
    """Forget a claim whose study could not be created, so that a retry may try again."""
    engine = engine_of(storage)
    if engine is None:
        with _lock:
            _local.pop(key_sha256, None)
        return
    with engine.begin() as connection:
        connection.execute(delete(KEYS).where(KEYS.c.key_sha256 == key_sha256))


def _claim_locally(key_sha256: str, request_sha256: str, study_name: str) -> Claim:
    with _lock:
        found = _local.get(key_sha256)
        if found is not None:
            return Claim(found.request_sha256, found.study_name, new=False)
        _local[key_sha256] = Claim(request_sha256, study_name, new=False)
    return Claim(request_sha256, study_name, new=True)


def release_study_keys(storage: BaseStorage, study_name: str) -> None:
    """Forget every claim that names ``study_name``, once that study is deleted: a retry of
    the request that created it then creates it anew instead of waiting for it."""
    engine = engine_of(storage)
    if engine is None:
        with _lock:
            for key in [k for k, c in _local.items() if c.study_name == study_name]:
                del _local[key]
        return
    ensure_tables(engine)
    with engine.begin() as connection:
        connection.execute(delete(KEYS).where(KEYS.c.study_name == study_name))
