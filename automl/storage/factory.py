"""Optuna storage and artifact store construction."""

from __future__ import annotations

import copy
import functools
import re
import sqlite3
import time
import warnings
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.storages._cached_storage import _CachedStorage
from optuna.storages._rdb.models import BaseModel
from optuna.trial import TrialState
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    DatabaseError,
    IntegrityError,
    NoSuchModuleError,
    OperationalError,
    ProgrammingError,
)

from automl.errors import SpecError, StorageUnavailable
from automl.storage.rdb import HeartbeatRDBStorage

if TYPE_CHECKING:
    from collections.abc import Callable, Container

    from optuna.artifacts import FileSystemArtifactStore
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial
    from sqlalchemy.engine import Engine

    from automl.settings import Settings

_CREATE_ATTEMPTS = 5
# PostgreSQL's duplicate_table, duplicate_object and unique_violation: another process was first.
_ALREADY_EXISTS = {"42P07", "42710", "23505"}
_SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
_OPTUNA_TABLES = frozenset(BaseModel.metadata.tables)


def _rereads(write: Callable[..., Any]) -> Callable[..., Any]:
    """A trial write of :class:`TrialCache`: the trial's next read goes to the database."""

    @functools.wraps(write)
    def written(self: TrialCache, trial_id: int, *args: Any, **kwargs: Any) -> Any:
        with self._lock:  # before the write, so that no read between them gets the blank trial
            self._created.discard(trial_id)
        return write(self, trial_id, *args, **kwargs)

    return written


class TrialCache(_CachedStorage):
    """Optuna's trial cache, with fewer queries per trial.

    Each ``ask`` looks for WAITING trials, and Optuna's cache answers by reading every
    unfinished trial of the study again, with its params and attrs: with 32 workers on a study,
    32 RUNNING trials per ``ask`` (15 ms of a worker's CPU). Here a study with no WAITING trial
    answers at once; one with some is read as before. And the trial ``ask`` creates is not read
    back, unless something was written to it first.
    """

    _backend: HeartbeatRDBStorage

    def __init__(self, backend: HeartbeatRDBStorage) -> None:
        super().__init__(backend)
        self._created: set[int] = set()  # blank trials created here, not yet read or written

    def __getstate__(self) -> dict[Any, Any]:
        """Optuna's picklable state; a copy reads its first trial from the database.

        The copy would not see the writes made here after it was taken.
        """
        return {**super().__getstate__(), "_created": set()}

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        """Create a trial; a blank one (``ask``'s) is kept for the ``get_trial`` that follows."""
        trial_id = super().create_new_trial(study_id, template_trial)
        if template_trial is None:
            with self._lock:
                self._created.add(trial_id)
        return trial_id

    def get_trial(self, trial_id: int) -> FrozenTrial:
        """Optuna's ``get_trial``; the first read of a blank trial created here is the cache's.

        ``ask`` creates a trial and at once reads it back (six queries). Nothing has written to
        it in between: it is still the RUNNING trial without params or attrs that was cached.
        A trial written first (a param, a value, an attr) is read from the database.
        """
        with self._lock:
            if trial_id in self._created:
                self._created.discard(trial_id)
                study_id, number = self._trial_id_to_study_id_and_number[trial_id]
                return copy.deepcopy(self._studies[study_id].trials[number])
        return super().get_trial(trial_id)

    set_trial_param = _rereads(_CachedStorage.set_trial_param)
    set_trial_state_values = _rereads(_CachedStorage.set_trial_state_values)
    set_trial_intermediate_value = _rereads(_CachedStorage.set_trial_intermediate_value)
    set_trial_user_attr = _rereads(_CachedStorage.set_trial_user_attr)
    set_trial_system_attr = _rereads(_CachedStorage.set_trial_system_attr)

    @_rereads
    def set_trial_attrs(
        self,
        trial_id: int,
        user_attrs: dict[str, Any],
        system_attrs: dict[str, Any] | None = None,
    ) -> None:
        """See :meth:`HeartbeatRDBStorage.set_trial_attrs`."""
        self._backend.set_trial_attrs(trial_id, user_attrs, system_attrs)

    def count_trials(self, study_id: int) -> tuple[dict[TrialState, int], datetime | None]:
        """See :meth:`HeartbeatRDBStorage.count_trials`."""
        return self._backend.count_trials(study_id)

    def count_taken_trials(self, study_id: int, number: int) -> int:
        """See :meth:`HeartbeatRDBStorage.count_taken_trials`."""
        return self._backend.count_taken_trials(study_id, number)

    def get_all_trials(
        self,
        study_id: int,
        deepcopy: bool = True,
        states: Container[TrialState] | None = None,
    ) -> list[FrozenTrial]:
        """Optuna's ``get_all_trials``; a query for WAITING trials only may skip the read."""
        waiting_only = states is not None and list(states) == [TrialState.WAITING]
        if waiting_only and not self._backend.has_waiting_trials(study_id):
            return []
        return super().get_all_trials(study_id, deepcopy=deepcopy, states=states)


def cached(storage: BaseStorage) -> BaseStorage:
    """Wrap an RDB storage in Optuna's trial cache; other storages are returned unchanged.

    Finished trials never change, so the cache reads only new and unfinished trials on each
    call. Keep the returned object for the life of the process.
    """
    if isinstance(storage, HeartbeatRDBStorage):
        return TrialCache(storage)
    return optuna.storages.get_storage(storage)


def open_storage(url: str, settings: Settings, *, create: bool = True) -> HeartbeatRDBStorage:
    """Open an Optuna RDB storage for any SQLAlchemy URL.

    SQLite files get their folder created and a lock timeout suited to several local processes;
    server databases get ``pool_pre_ping`` and a small pool.

    Args:
        url: SQLAlchemy URL, e.g. ``sqlite:///studies/automl.db`` or ``postgresql+psycopg://…``.
        settings: Pool, timeout and heartbeat settings. Trials send heartbeats; a trial whose
            worker died is failed after the grace period and re-queued with the same params
            up to ``max_retry`` times (the retry history is in its system attrs).
        create: Create a SQLite storage where there is none (no file, or an empty one).
            Read-only commands pass False, so that a mistyped path is an error instead of a
            new empty storage, and Optuna's tables are never written into a file they read.

    Raises:
        SpecError: The URL is malformed, its database driver is not installed, or its SQLite
            file is some other kind of file.
        StorageUnavailable: The database cannot be reached or read, its tables were set up by
            another Optuna version, or (``create`` off) a SQLite file holds no storage.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as e:
        hint = f"; a SQLite file is given as sqlite:///{url}" if "://" not in url else ""
        raise SpecError(f"invalid storage URL {url!r}: {e}{hint}") from e
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            _check_sqlite_file(Path(parsed.database), shown, create=create)
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
    except ProgrammingError as e:  # e.g. the role may not create tables in the schema
        raise StorageUnavailable(
            f"cannot set up Optuna's tables in {shown}: {' '.join(str(e.orig).split())}; the "
            "role needs to own the database (or have CREATE on its schema)"
        ) from None
    except RuntimeError as e:
        if "table schema" not in str(e):
            raise
        raise StorageUnavailable(_schema_mismatch(shown, str(e))) from None
    except (ImportError, NoSuchModuleError):
        raise SpecError(
            f"no database driver for {parsed.drivername!r} is installed; use postgresql://… "
            "(psycopg 3 is installed) or sqlite:///path.db"
        ) from None
    except DatabaseError as e:  # e.g. a damaged SQLite file
        raise StorageUnavailable(
            f"cannot read the storage {shown}: {' '.join(str(e.orig).split())}; restore it from "
            "a backup, or give --storage (or AUTOML_STORAGE) another database"
        ) from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        _use_wal(storage.engine)
    return storage


def _check_sqlite_file(path: Path, shown: str, *, create: bool) -> None:
    """Refuse a SQLite path that holds no storage where one is read, or another kind of file.

    SQLite takes an empty file for an empty database, and Optuna would write its tables into
    it, or into another program's database: only a command that creates a storage may, and
    only into a new or empty file.
    """
    again = "check --storage (or AUTOML_STORAGE), or start a study there first"
    try:
        header = _read_header(path)
    except OSError as e:  # e.g. a file or folder this user may not read
        raise StorageUnavailable(
            f"cannot read the storage {shown}: {e.strerror or e}; check its permissions, or "
            "give --storage (or AUTOML_STORAGE) another database"
        ) from None
    if header is None:
        if not create:
            raise StorageUnavailable(
                f"no storage at {shown}: the file {str(path)!r} does not exist; {again}"
            )
        return
    if header and header != _SQLITE_HEADER:
        raise SpecError(
            f"{str(path)!r} is not a SQLite database: give --storage (or AUTOML_STORAGE) a "
            "storage that automl made, or the path of a new file"
        )
    if not header:
        if create:
            return
        raise StorageUnavailable(f"no storage at {shown}: the file is empty; {again}")
    tables = _table_names(path)
    if tables is None or "version_info" in tables:
        return
    if not create:
        raise StorageUnavailable(
            f"no storage at {shown}: the file is a SQLite database without Optuna's tables; {again}"
        )
    if tables and not tables & _OPTUNA_TABLES:  # some of them: another worker is creating them
        named = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise SpecError(
            f"{str(path)!r} is a SQLite database of another program (tables: {named}): give "
            "--storage (or AUTOML_STORAGE) a new file or a storage that automl made"
        )


def _read_header(path: Path) -> bytes | None:
    """The first bytes of the file at ``path``, or None where there is no file."""
    if not path.is_file():
        return None
    with path.open("rb") as file:
        return file.read(len(_SQLITE_HEADER))


def _table_names(path: Path) -> set[str] | None:
    """The tables of the SQLite file, opened read-only; None where it cannot be read so.

    A file that cannot be read so (locked, damaged, or a WAL file in a read-only folder) is
    opened as a storage anyway: that then says what is wrong.
    """
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        finally:
            db.close()
    except sqlite3.DatabaseError:
        return None
    return {name for (name,) in rows}


def _schema_mismatch(shown: str, optuna_says: str) -> str:
    """What to do with a storage whose tables another Optuna version set up."""
    found = re.search(r"set up by optuna ([^)\s]+)", optuna_says)
    by = f"Optuna {found.group(1)}" if found else "another Optuna"
    if "optuna storage upgrade" in optuna_says:  # an older Optuna: Alembic migrates it
        return (
            f"the storage {shown} was set up by {by}, older than this Optuna "
            f"{optuna.__version__}: back it up, upgrade its tables with `optuna storage upgrade "
            f"--storage '{shown}'` (a hidden password shows as ***), then run this again"
        )
    return (
        f"the storage {shown} was set up by {by}, which this Optuna {optuna.__version__} cannot "
        "read; open it with the Optuna that set it up, or a newer one"
    )


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
        except (IntegrityError, ProgrammingError, OperationalError) as e:
            sqlstate = getattr(e.orig, "sqlstate", None)  # SQLite's errors have none
            lost_race = sqlstate in _ALREADY_EXISTS or (
                sqlstate is None
                and (isinstance(e, IntegrityError) or "already exists" in str(e.orig))
            )
            if not lost_race or attempt == _CREATE_ATTEMPTS - 1:
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


def open_artifact_store(settings: Settings, *, create: bool = True) -> FileSystemArtifactStore:
    """The filesystem artifact store under ``settings.artifacts_dir``, created if missing
    unless ``create`` is off (a reader creates nothing: a missing model is then named)."""
    from automl.storage.artifacts import AtomicArtifactStore

    if create:
        settings.artifacts_dir.mkdir(parents=True, exist_ok=True)
    return AtomicArtifactStore(str(settings.artifacts_dir))
