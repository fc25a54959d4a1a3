"""Optuna storage and artifact store construction."""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    IntegrityError,
    NoSuchModuleError,
    OperationalError,
    ProgrammingError,
    SQLAlchemyError,
)

from automl.errors import SpecError, StorageUnavailable

if TYPE_CHECKING:
    from optuna.artifacts import FileSystemArtifactStore
    from sqlalchemy.engine import Engine

    from automl.settings import Settings

logger = logging.getLogger("automl.storage")
_CREATE_ATTEMPTS = 5


class HeartbeatRDBStorage(optuna.storages.RDBStorage):
    """An RDB storage whose heartbeats outlive a storage outage.

    Optuna's heartbeat thread ends at the first heartbeat that cannot be written. The trial
    would then run on unseen, and another worker would fail it as stale while it still runs.
    Here a lost heartbeat is logged and the next one is tried at the next interval.
    """

    def record_heartbeat(self, trial_id: int) -> None:
        """Record that trial ``trial_id`` is alive; an unreachable storage only logs."""
        try:
            super().record_heartbeat(trial_id)
        except (optuna.exceptions.StorageInternalError, SQLAlchemyError) as e:
            cause = e.__cause__ or e  # Optuna's wrapper blames "invalid data in the commit"
            logger.warning("heartbeat of trial id %d not recorded: %s", trial_id, cause)


def open_storage(url: str, settings: Settings) -> HeartbeatRDBStorage:
    """Open an Optuna RDB storage for any SQLAlchemy URL.

    SQLite files get their folder created and a lock timeout suited to several local processes;
    server databases get ``pool_pre_ping`` and a small pool.

    Args:
        url: SQLAlchemy URL, e.g. ``sqlite:///studies/automl.db`` or ``postgresql+psycopg://…``.
        settings: Pool, timeout and heartbeat settings. Trials send heartbeats; a trial whose
            worker died is failed after the grace period and re-queued with the same params
            up to ``max_retry`` times (the retry history is in its system attrs).

    Raises:
        SpecError: The URL is malformed, or its database driver is not installed.
        StorageUnavailable: The database cannot be reached.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as e:
        raise SpecError(f"invalid storage URL {url!r}: {e}") from e
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine_kwargs: dict = {"connect_args": {"timeout": settings.sqlite_timeout_s}}
    else:
        if parsed.drivername in ("postgresql", "postgres"):
            url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
        engine_kwargs = {
            "pool_pre_ping": True,
            "pool_size": settings.pool_size,
            "max_overflow": settings.max_overflow,
        }
    try:
        storage = _connect(url, engine_kwargs, settings)
    except OperationalError as e:
        raise StorageUnavailable(
            f"cannot open the storage {shown}: {' '.join(str(e.orig).split())}; check that "
            "the database server runs and that the URL's host, port, database and user are right"
        ) from None
    except (ImportError, NoSuchModuleError):
        raise SpecError(
            f"no database driver for {parsed.drivername!r} is installed; use postgresql://… "
            "(psycopg 3 is installed) or sqlite:///path.db"
        ) from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        _use_wal(storage.engine)
    return storage


def _connect(url: str, engine_kwargs: dict, settings: Settings) -> HeartbeatRDBStorage:
    """Open the storage, creating Optuna's tables in a new database.

    Workers that start together on a new database race to create the tables; the losers see a
    duplicate table or type, and succeed once they retry.
    """
    for attempt in range(_CREATE_ATTEMPTS):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                retry = optuna.storages.RetryHeartbeatStaleTrialCallback(settings.max_retry)
                return HeartbeatRDBStorage(
                    url,
                    engine_kwargs=engine_kwargs,
                    heartbeat_interval=settings.heartbeat_interval_s,
                    grace_period=settings.grace_period_s,
                    heartbeat_stale_trial_callback=retry,
                )
        except (IntegrityError, ProgrammingError):
            if attempt == _CREATE_ATTEMPTS - 1:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def _use_wal(engine: Engine) -> None:
    """Write-ahead log and ``synchronous=NORMAL``: a commit no longer waits for an fsync.

    Committed trials survive a crash of the process; only a power cut can lose the last few.
    Readers (the dashboard, the API) then never block the writing worker.
    """

    @event.listens_for(engine, "connect")
    def _pragmas(connection, _record) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    engine.dispose()  # connections opened before the listener reconnect with it


def open_artifact_store(settings: Settings) -> FileSystemArtifactStore:
    """The filesystem artifact store under ``settings.artifacts_dir``, created if missing."""
    from optuna.artifacts import FileSystemArtifactStore

    settings.artifacts_dir.mkdir(parents=True, exist_ok=True)
    return FileSystemArtifactStore(str(settings.artifacts_dir))
