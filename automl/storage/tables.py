"""automl's own tables, beside Optuna's in the study storage's database.

Each is created on first use (by whichever process comes first); storages without a database
(Optuna's in-memory one) have none, and callers fall back to what one process can know.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sqlalchemy import Column, DateTime, MetaData, String, Table, inspect
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

if TYPE_CHECKING:
    from optuna.storages import BaseStorage
    from sqlalchemy.engine import Engine

METADATA = MetaData()
IDEMPOTENCY_KEYS = Table(
    "automl_idempotency_keys",
    METADATA,
    Column("key_sha256", String(64), primary_key=True),
    Column("request_sha256", String(64), nullable=False),
    Column("study_name", String(512), nullable=False),
    Column("created_at", DateTime, nullable=False),
)
WORKERS = Table(
    "automl_workers",
    METADATA,
    Column("worker_id", String(255), primary_key=True),  # host:pid
    Column("targets", String(1024), nullable=False),  # comma-separated target names
    Column("seen_at", DateTime, nullable=False),  # naive UTC
)
_ready: set[str] = set()  # engine URLs whose tables exist
_CREATE_ATTEMPTS = 5


def engine_of(storage: BaseStorage) -> Engine | None:
    """The database engine behind ``storage`` (through a trial cache), if it has one."""
    backend = getattr(storage, "_backend", storage)
    return getattr(backend, "engine", None)


def ensure_tables(engine: Engine) -> None:
    """Create the tables once per database; another process may be creating them too."""
    url = engine.url.render_as_string(hide_password=False)
    if url in _ready:
        return
    for attempt in range(_CREATE_ATTEMPTS):
        try:
            METADATA.create_all(engine, checkfirst=True)
            break
        except (IntegrityError, OperationalError, ProgrammingError):
            # Another creator won a table; it may not have made the others yet: check, then
            # create what is still missing.
            if all(inspect(engine).has_table(t) for t in METADATA.tables):
                break
            if attempt == _CREATE_ATTEMPTS - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    _ready.add(url)
