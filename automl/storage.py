"""Optuna storage and artifact store construction."""

from __future__ import annotations

import copy
import json
import logging
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.storages._cached_storage import _CachedStorage
from optuna.storages._rdb.models import TrialHeartbeatModel, TrialModel, TrialUserAttributeModel
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.trial import TrialState
from sqlalchemy import event, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
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
    from collections.abc import Container, Sequence

    from optuna.artifacts import FileSystemArtifactStore
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial
    from sqlalchemy.engine import Engine
    from sqlalchemy.orm import Session

    from automl.settings import Settings

logger = logging.getLogger("automl.storage")
_CREATE_ATTEMPTS = 5
# PostgreSQL's duplicate_table, duplicate_object and unique_violation: another process was first.
_ALREADY_EXISTS = {"42P07", "42710", "23505"}


class HeartbeatRDBStorage(optuna.storages.RDBStorage):
    """An RDB storage whose heartbeats cover a trial's whole run and outlive a storage outage.

    A trial gets its first heartbeat when it is created (in the same transaction), so a worker
    that dies at any point leaves a trial that goes stale. Optuna's heartbeat thread ends at the
    first heartbeat that cannot be written; the trial would then run on unseen, and another
    worker would fail it as stale while it still runs. Here a lost heartbeat is logged and tried
    at the next interval.
    The heartbeat thread's first beat, a moment after the one ``ask`` wrote, is skipped.
    """

    _first_beat: tuple[int, float] | None = None  # (trial id, monotonic time) of the last one

    def __getstate__(self) -> dict:
        """Optuna's picklable state, less the first beat: its clock is this process's."""
        state = super().__getstate__()
        state.pop("_first_beat", None)
        return state

    def _create_new_trial(
        self, study_id: int, template_trial: FrozenTrial | None = None
    ) -> FrozenTrial:
        """Create a trial; one created RUNNING (by ``ask``) gets its first heartbeat at once.

        Optuna's heartbeat thread starts only after the sampler's ``before_trial``. A worker that
        dies before that would leave a RUNNING trial without a heartbeat, which no reaper fails.
        (Optuna's trial cache calls this private method; ``create_new_trial`` does too.)
        """
        trial = super()._create_new_trial(study_id, template_trial)
        if template_trial is None and self.heartbeat_interval is not None:
            self._first_beat = (trial._trial_id, time.monotonic())
        return trial

    def _get_prepared_new_trial(
        self, study_id: int, template_trial: FrozenTrial | None, session: Session
    ) -> TrialModel:
        """Optuna's new trial row; a RUNNING one gets its heartbeat in the same transaction."""
        trial = super()._get_prepared_new_trial(study_id, template_trial, session)
        if template_trial is None and self.heartbeat_interval is not None:
            session.add(TrialHeartbeatModel(trial_id=trial.trial_id))  # the database's clock
        return trial

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        """Set a trial's state; a WAITING trial that ``ask`` pops gets its first heartbeat."""
        changed = super().set_trial_state_values(trial_id, state, values)
        if changed and state == TrialState.RUNNING:
            self._first_heartbeat(trial_id)
        return changed

    def _first_heartbeat(self, trial_id: int) -> None:
        if self.heartbeat_interval is not None and self._write_heartbeat(trial_id, first=True):
            self._first_beat = (trial_id, time.monotonic())

    def record_heartbeat(self, trial_id: int) -> None:
        """Record that trial ``trial_id`` is alive; an unreachable storage only logs.

        A beat within half an interval of the trial's first one (the heartbeat thread starting
        right after ``ask``) would write nothing new, and is skipped: a trial is stale only
        after the grace period, at least two intervals.
        """
        first, self._first_beat = self._first_beat, None
        if first is not None and first[0] == trial_id:
            assert self.heartbeat_interval is not None
            if time.monotonic() - first[1] < self.heartbeat_interval / 2:
                return
        self._write_heartbeat(trial_id)

    def set_trial_user_attrs(self, trial_id: int, attrs: dict[str, Any]) -> None:
        """Set several user attrs of a running trial in one statement, instead of one each.

        A trial ends with some 25 attrs, each of which Optuna writes with a query, an upsert
        and a commit (about 0.6 ms on SQLite). SQLite and PostgreSQL take one multi-row
        upsert; other databases get Optuna's statements in one transaction.
        """
        upsert = {"sqlite": sqlite_insert, "postgresql": postgresql_insert}.get(self.engine.name)
        with _create_scoped_session(self.scoped_session, True) as session:
            if upsert is None:
                for key, value in attrs.items():
                    self._set_trial_attr_without_commit(
                        session, TrialUserAttributeModel, trial_id, key, value
                    )
                return
            trial = TrialModel.find_or_raise_by_id(trial_id, session)
            self.check_trial_is_updatable(trial_id, trial.state)
            attr = TrialUserAttributeModel
            rows = [{"trial_id": trial_id, "key": k, "value_json": json.dumps(v)}
                    for k, v in attrs.items()]  # fmt: skip
            statement = upsert(attr).values(rows)
            session.execute(
                statement.on_conflict_do_update(
                    index_elements=[attr.trial_id, attr.key],
                    set_={"value_json": statement.excluded.value_json},
                )
            )

    def has_waiting_trials(self, study_id: int) -> bool:
        """Whether study ``study_id`` has an enqueued (WAITING) trial: one indexed query."""
        query = (
            select(TrialModel.trial_id)
            .where(TrialModel.study_id == study_id, TrialModel.state == TrialState.WAITING)
            .limit(1)
        )
        with self.engine.connect() as connection:
            return connection.execute(query).first() is not None

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        """Optuna's stale trials (RUNNING, last heartbeat over the grace period ago), in a query.

        Optuna loads every RUNNING trial of the study and its heartbeat as ORM objects, at the
        start of every trial; this compares in the database and returns only the ids.
        PostgreSQL stores heartbeats as the session's local time, so the clock read is too
        (``LOCALTIMESTAMP``): Optuna's ``now()`` comes back in UTC when the client cannot
        resolve the session's time zone, and fresh trials then looked hours old.
        """
        assert self.heartbeat_interval is not None
        grace_s = (
            self.grace_period if self.grace_period is not None else 2 * self.heartbeat_interval
        )
        beat = TrialHeartbeatModel
        with self.engine.connect() as connection:
            clock = func.localtimestamp() if self.engine.name == "postgresql" else func.now()
            now = connection.execute(select(clock)).scalar_one().replace(tzinfo=None)
            query = (
                select(TrialModel.trial_id)
                .join(beat, beat.trial_id == TrialModel.trial_id)
                .where(TrialModel.study_id == study_id, TrialModel.state == TrialState.RUNNING)
                .where(beat.heartbeat < now - timedelta(seconds=grace_s))
            )
            return list(connection.execute(query).scalars())

    def _write_heartbeat(self, trial_id: int, *, first: bool = False) -> bool:
        """Set the trial's heartbeat to the database's clock: an insert first, then updates.

        Optuna's own takes five statements (two reads, a read for update, the clock, the update).
        Only the trial's worker writes its heartbeat, so update-else-insert does not race.
        """
        beat, now = TrialHeartbeatModel, func.now()
        try:
            with self.engine.begin() as connection:
                update_beat = update(beat).where(beat.trial_id == trial_id).values(heartbeat=now)
                if first or connection.execute(update_beat).rowcount == 0:
                    connection.execute(insert(beat).values(trial_id=trial_id, heartbeat=now))
        except (optuna.exceptions.StorageInternalError, SQLAlchemyError) as e:
            cause = e.__cause__ or e  # Optuna's wrapper blames "invalid data in the commit"
            logger.warning("heartbeat of trial id %d not recorded: %s", trial_id, cause)
            return False
        return True


class TrialCache(_CachedStorage):
    """Optuna's trial cache, with fewer queries per trial.

    Each ``ask`` looks for WAITING trials, and Optuna's cache answers by reading every
    unfinished trial of the study again, with its params and attrs: with 32 workers on a study,
    32 RUNNING trials per ``ask`` (15 ms of a worker's CPU). Here a study with no WAITING trial
    answers at once; one with some is read as before. And the trial ``ask`` creates is not read
    back.
    """

    _backend: HeartbeatRDBStorage

    def __init__(self, backend: HeartbeatRDBStorage) -> None:
        super().__init__(backend)
        self._created: set[int] = set()  # blank trials created here and not yet read

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
        """
        with self._lock:
            if trial_id in self._created:
                self._created.discard(trial_id)
                study_id, number = self._trial_id_to_study_id_and_number[trial_id]
                return copy.deepcopy(self._studies[study_id].trials[number])
        return super().get_trial(trial_id)

    def set_trial_user_attrs(self, trial_id: int, attrs: dict[str, Any]) -> None:
        """See :meth:`HeartbeatRDBStorage.set_trial_user_attrs`."""
        self._backend.set_trial_user_attrs(trial_id, attrs)

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
    except ProgrammingError as e:  # e.g. the role may not create tables in the schema
        raise StorageUnavailable(
            f"cannot set up Optuna's tables in {shown}: {' '.join(str(e.orig).split())}; the "
            "role needs to own the database (or have CREATE on its schema)"
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
        except (IntegrityError, ProgrammingError) as e:
            sqlstate = getattr(e.orig, "sqlstate", None)  # SQLite's errors have none
            lost_race = sqlstate in _ALREADY_EXISTS or (
                sqlstate is None and isinstance(e, IntegrityError)
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


def open_artifact_store(settings: Settings) -> FileSystemArtifactStore:
    """The filesystem artifact store under ``settings.artifacts_dir``, created if missing."""
    from optuna.artifacts import FileSystemArtifactStore

    settings.artifacts_dir.mkdir(parents=True, exist_ok=True)
    return FileSystemArtifactStore(str(settings.artifacts_dir))
