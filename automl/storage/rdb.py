"""Our Optuna RDB storage: heartbeats that outlive an outage, and fewer queries per trial."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import optuna
from optuna.storages._rdb.models import (
    TrialHeartbeatModel,
    TrialModel,
    TrialSystemAttributeModel,
    TrialUserAttributeModel,
)
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.trial import TrialState
from sqlalchemy import and_, func, insert, or_, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import SQLAlchemyError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from optuna.trial import FrozenTrial
    from sqlalchemy.orm import Session

logger = logging.getLogger("automl.storage.factory")


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

    def set_trial_attrs(
        self,
        trial_id: int,
        user_attrs: dict[str, Any],
        system_attrs: dict[str, Any] | None = None,
    ) -> None:
        """Set several user and system attrs of a running trial in one transaction.

        A trial ends with some 25 user attrs and a few system ones (its constraints), each of
        which Optuna writes with a query, an upsert and a commit (about 0.6 ms on SQLite).
        SQLite and PostgreSQL take one multi-row upsert per table; other databases get
        Optuna's statements, in the same transaction.
        """
        upsert = {"sqlite": sqlite_insert, "postgresql": postgresql_insert}.get(self.engine.name)
        tables = ((TrialUserAttributeModel, user_attrs), (TrialSystemAttributeModel, system_attrs))
        with _create_scoped_session(self.scoped_session, True) as session:
            trial = TrialModel.find_or_raise_by_id(trial_id, session)
            self.check_trial_is_updatable(trial_id, trial.state)
            for model, attrs in tables:
                if not attrs:
                    continue
                if upsert is None:
                    for key, value in attrs.items():
                        self._set_trial_attr_without_commit(session, model, trial_id, key, value)
                    continue
                rows = [{"trial_id": trial_id, "key": k, "value_json": json.dumps(v)}
                        for k, v in attrs.items()]  # fmt: skip
                statement = upsert(model).values(rows)
                session.execute(
                    statement.on_conflict_do_update(
                        index_elements=[model.trial_id, model.key],
                        set_={"value_json": statement.excluded.value_json},
                    )
                )

    def count_trials(self, study_id: int) -> tuple[dict[TrialState, int], datetime | None]:
        """Trials of study ``study_id`` per state, and the first one's start: one query.

        A worker checks them before each trial; reading the trials themselves (their params
        and attrs) takes seven queries.
        """
        query = (
            select(TrialModel.state, func.count(), func.min(TrialModel._datetime_start_utc))
            .where(TrialModel.study_id == study_id)
            .group_by(TrialModel.state)
        )
        with self.engine.connect() as connection:
            rows = connection.execute(query).all()
        first = min((start for *_, start in rows if start is not None), default=None)
        if first is not None:  # Optuna stores naive UTC and reads it as naive local time
            first = first.replace(tzinfo=UTC).astimezone().replace(tzinfo=None)
        return {state: count for state, count, _ in rows}, first

    def count_taken_trials(self, study_id: int, number: int) -> int:
        """COMPLETE trials of study ``study_id``, and RUNNING ones numbered below ``number``."""
        state, running = TrialModel.state, TrialState.RUNNING
        query = select(func.count()).where(
            TrialModel.study_id == study_id,
            or_(state == TrialState.COMPLETE, and_(state == running, TrialModel.number < number)),
        )
        with self.engine.connect() as connection:
            return connection.execute(query).scalar_one()

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
