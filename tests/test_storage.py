"""Storages as workers open them: heartbeats that outlive a PostgreSQL outage."""

from __future__ import annotations

import time

import optuna
import sqlalchemy
from conftest import PgProxy, pg_schema

from automl.settings import Settings
from automl.storage import open_storage


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
