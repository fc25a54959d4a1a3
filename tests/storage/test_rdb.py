"""Our RDB storage: heartbeats through an outage, attrs in one commit, counts in one query."""

from __future__ import annotations

import pickle
import time
from collections import Counter
from datetime import timedelta

import optuna
import pytest
import sqlalchemy
from conftest import PgProxy, pg_schema
from optuna.trial import TrialState

from automl.settings import Settings
from automl.storage.factory import cached, open_storage


def test_heartbeats_resume_after_a_storage_outage():
    with pg_schema() as url:
        proxy = PgProxy()
        proxied = url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
        settings = Settings(storage=proxied, heartbeat_interval_s=1, grace_period_s=60)
        study = optuna.create_study(storage=open_storage(proxied, settings))
        direct = sqlalchemy.create_engine(url)
        back = {}

        def objective(trial: optuna.Trial) -> float:
            proxy.outage(2.5)  # the heartbeat thread meets a dropped, then refused, connection
            with direct.connect() as connection:
                back["at"] = connection.execute(sqlalchemy.text("SELECT now()::timestamp")).scalar()
            time.sleep(3)  # three more heartbeat intervals
            return 1.0

        study.optimize(objective, n_trials=1)
        with direct.connect() as connection:
            beat = connection.execute(sqlalchemy.text("SELECT heartbeat FROM trial_heartbeats"))
            last_beat = beat.scalar_one()
        direct.dispose()
        assert study.trials[0].state == optuna.trial.TrialState.COMPLETE
        # Optuna's own heartbeat thread would have ended at the outage.
        assert last_beat > back["at"], (last_beat, back["at"])


def test_a_trial_writes_its_first_heartbeat_once():
    writes = []

    def record_write(_connection, _cursor, statement, *_) -> None:
        if "trial_heartbeats" in statement and not statement.startswith("SELECT"):
            writes.append(statement.split()[0])

    with pg_schema() as url:  # PostgreSQL's now() changes within a second; SQLite's does not
        settings = Settings(storage=url, heartbeat_interval_s=1, grace_period_s=60)
        storage = open_storage(url, settings)
        sqlalchemy.event.listen(storage.engine, "before_cursor_execute", record_write)
        study = optuna.create_study(storage=storage)
        study.optimize(lambda trial: 1.0, n_trials=1)  # the thread's first beat repeats ask's
        assert writes == ["INSERT"]
        study.optimize(lambda trial: time.sleep(1.5) or 1.0, n_trials=1)  # one beat at 1 s
        assert writes == ["INSERT", "INSERT", "UPDATE"]
        study.ask()
        assert pickle.loads(pickle.dumps(storage))._first_beat is None  # another process's clock
        storage.engine.dispose()


def test_stale_trials_are_the_ones_optuna_finds(storage_url):
    storage = open_storage(storage_url, Settings(heartbeat_interval_s=1, grace_period_s=60))
    study = optuna.create_study(storage=storage)
    stale, finished, alive = (study.ask() for _ in range(3))
    study.tell(finished, 1.0)
    with storage.engine.begin() as connection:
        now = connection.execute(sqlalchemy.select(sqlalchemy.func.now())).scalar_one()
        beats = sqlalchemy.table("trial_heartbeats", sqlalchemy.column("trial_id"),
                                 sqlalchemy.column("heartbeat"))  # fmt: skip
        for trial, age_s in ((stale, 61), (finished, 3600), (alive, 59)):
            connection.execute(
                beats.update()
                .where(beats.c.trial_id == trial._trial_id)
                .values(heartbeat=now.replace(tzinfo=None) - timedelta(seconds=age_s))
            )
    ours = storage._get_stale_trial_ids(study._study_id)
    assert ours == optuna.storages.RDBStorage._get_stale_trial_ids(storage, study._study_id)
    assert ours == [stale._trial_id]
    storage.engine.dispose()


def test_attrs_set_together_take_one_commit(storage_url):
    storage = cached(open_storage(storage_url, Settings()))
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    trial.set_user_attr("kept", 1)
    trial.set_constraint("0", 1.0)
    commits = []
    sqlalchemy.event.listen(storage._backend.engine, "commit", lambda _conn: commits.append(1))

    user = {"a": 1.5, "b": {"nested": [1, 2]}, "kept": 2}
    system = {"constraints:0": -0.5, "constraints:1": 2.0, "constraints": [-0.5, 2.0]}
    storage.set_trial_attrs(trial._trial_id, user, system)

    assert commits == [1]
    stored = storage.get_trial(trial._trial_id)
    assert stored.user_attrs == user
    assert {k: v for k, v in stored.system_attrs.items() if k.startswith("constraints")} == system
    assert stored.constraints == {"0": -0.5, "1": 2.0}  # as Optuna reads them
    study.tell(trial, 1.0)
    with pytest.raises(RuntimeError, match="finished"):  # a finished trial is not updatable
        storage.set_trial_attrs(trial._trial_id, {"late": 1})
    storage._backend.engine.dispose()


def test_trial_counts_are_the_ones_read_from_the_trials(storage_url):
    storage = cached(open_storage(storage_url, Settings()))
    study = optuna.create_study(storage=storage)
    assert storage.count_trials(study._study_id) == ({}, None)
    trials = [study.ask() for _ in range(6)]  # numbers 0 to 5
    study.tell(trials[1], 1.0)
    study.tell(trials[4], 2.0)
    study.tell(trials[2], state=TrialState.FAIL)
    study.enqueue_trial({})
    read = study.get_trials(deepcopy=False)

    by_state, first = storage.count_trials(study._study_id)

    assert by_state == dict(Counter(t.state for t in read))
    assert first == min(t.datetime_start for t in read if t.datetime_start is not None)
    assert first == trials[0].datetime_start and first.tzinfo is None  # Optuna's local time
    running = [t for t in read if t.state == TrialState.RUNNING]  # numbers 0, 3 and 5
    for number in range(7):
        ours = storage.count_taken_trials(study._study_id, number)
        assert ours == 2 + sum(t.number < number for t in running), number
    storage._backend.engine.dispose()


def test_a_fresh_trial_is_not_stale_in_a_time_zone_the_client_cannot_resolve():
    with pg_schema() as url:
        west = url + "%20-ctimezone%3D%3C-05%3E%2B05"  # POSIX zone: psycopg falls back to UTC
        storage = open_storage(west, Settings(heartbeat_interval_s=1, grace_period_s=60))
        study = optuna.create_study(storage=storage)
        study.ask()
        assert storage._get_stale_trial_ids(study._study_id) == []
        storage.engine.dispose()
