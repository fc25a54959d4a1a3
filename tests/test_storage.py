"""Storages as workers open them: new databases, bad URLs, heartbeats through an outage."""

from __future__ import annotations

import multiprocessing
import pickle
import time
from datetime import timedelta

import optuna
import pytest
import sqlalchemy
from conftest import PgProxy, pg_schema

from automl.errors import SpecError, StorageUnavailable
from automl.settings import Settings
from automl.storage import TrialCache, cached, open_storage


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


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'study.db'}"
    else:
        with pg_schema() as url:
            yield url


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


def test_user_attrs_set_together_take_one_commit(storage_url):
    storage = cached(open_storage(storage_url, Settings()))
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    trial.set_user_attr("kept", 1)
    commits = []
    sqlalchemy.event.listen(storage._backend.engine, "commit", lambda _conn: commits.append(1))

    storage.set_trial_user_attrs(trial._trial_id, {"a": 1.5, "b": {"nested": [1, 2]}, "kept": 2})

    assert commits == [1]
    assert storage.get_trial(trial._trial_id).user_attrs == {"a": 1.5, "b": {"nested": [1, 2]},
                                                             "kept": 2}  # fmt: skip
    study.tell(trial, 1.0)
    with pytest.raises(RuntimeError, match="finished"):  # a finished trial is not updatable
        storage.set_trial_user_attrs(trial._trial_id, {"late": 1})
    storage._backend.engine.dispose()


def test_a_fresh_trial_is_not_stale_in_a_time_zone_the_client_cannot_resolve():
    with pg_schema() as url:
        west = url + "%20-ctimezone%3D%3C-05%3E%2B05"  # POSIX zone: psycopg falls back to UTC
        storage = open_storage(west, Settings(heartbeat_interval_s=1, grace_period_s=60))
        study = optuna.create_study(storage=storage)
        study.ask()
        assert storage._get_stale_trial_ids(study._study_id) == []
        storage.engine.dispose()


def test_the_trial_cache_looks_for_enqueued_trials_in_one_query():
    with pg_schema() as url:
        settings = Settings(storage=url, heartbeat_interval_s=1, grace_period_s=60)
        other = optuna.create_study(storage=open_storage(url, settings))
        for _ in range(3):
            other.ask()  # RUNNING trials of other workers
        storage = cached(open_storage(url, settings))
        assert isinstance(storage, TrialCache)
        statements = []
        sqlalchemy.event.listen(
            storage._backend.engine,
            "before_cursor_execute",
            lambda _conn, _cur, statement, *_: statements.append(statement),
        )
        waiting = (optuna.trial.TrialState.WAITING,)
        assert storage.get_all_trials(other._study_id, states=waiting) == []
        assert len(statements) == 1
        other.enqueue_trial({"x": 0.5})
        study = optuna.load_study(study_name=other.study_name, storage=storage)
        assert study.ask().suggest_float("x", 0, 1) == 0.5  # the enqueued trial is popped
        assert storage.get_all_trials(other._study_id, states=waiting) == []
        storage._backend.engine.dispose()


def test_the_trial_cache_does_not_read_back_a_trial_it_just_created():
    with pg_schema() as url:
        settings = Settings(storage=url, heartbeat_interval_s=1, grace_period_s=60)
        storage = cached(open_storage(url, settings))
        study = optuna.create_study(storage=storage)
        trial_id = storage.create_new_trial(study._study_id)
        statements = []
        engine = storage._backend.engine
        sqlalchemy.event.listen(
            engine, "before_cursor_execute", lambda *args: statements.append(args[2])
        )
        created = storage.get_trial(trial_id)
        assert statements == []
        assert created == storage._backend.get_trial(trial_id)  # what the database holds
        statements.clear()
        storage.set_trial_param(trial_id, "x", 0.5, optuna.distributions.FloatDistribution(0, 1))
        assert storage.get_trial(trial_id).params == {"x": 0.5}  # later reads go to the database
        assert statements
        engine.dispose()


def _open_when_released(url: str, barrier, results) -> None:
    barrier.wait()
    try:
        open_storage(url, Settings(storage=url))
        results.put("ok")
    except Exception as e:  # reported to the test
        results.put(f"{type(e).__name__}: {e}")


def test_workers_starting_together_on_a_new_database_all_open_it():
    context = multiprocessing.get_context("spawn")
    for _ in range(2):  # the race to create the tables is lost by most openers, most times
        with pg_schema() as url:
            barrier, results = context.Barrier(4), context.Queue()
            openers = [
                context.Process(target=_open_when_released, args=(url, barrier, results))
                for _ in range(4)
            ]
            for process in openers:
                process.start()
            outcomes = [results.get(timeout=120) for _ in openers]
            for process in openers:
                process.join()
            assert outcomes == ["ok"] * 4


def test_an_unreachable_or_unsupported_storage_is_one_clear_error():
    url = "postgresql://automl:secret@127.0.0.1:1/automl"
    with pytest.raises(StorageUnavailable, match="Connection refused") as refused:
        open_storage(url, Settings(storage=url))
    assert "secret" not in str(refused.value) and "check that the database server runs" in str(
        refused.value
    )
    with pytest.raises(SpecError, match="no database driver for 'mysql'"):
        open_storage("mysql://root@127.0.0.1/test", Settings())


def test_a_role_that_may_not_create_the_tables_is_one_clear_error():
    import psycopg

    with pg_schema() as url:
        schema = url.rsplit("%3D", 1)[1]
        role = f"automl_reader_{schema}"
        with psycopg.connect(url.replace("+psycopg", "").split("?")[0], autocommit=True) as db:
            db.execute(f'CREATE ROLE "{role}" LOGIN')
            db.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')  # no CREATE
        try:
            reader = url.replace("//postgres@", f"//{role}@").replace("//root@", f"//{role}@")
            with pytest.raises(StorageUnavailable, match="role needs to own the database"):
                open_storage(reader, Settings(storage=reader))
        finally:
            with psycopg.connect(url.replace("+psycopg", "").split("?")[0], autocommit=True) as db:
                db.execute(f'REVOKE ALL ON SCHEMA "{schema}" FROM "{role}"')
                db.execute(f'DROP ROLE "{role}"')
