"""What the trial loop counts as a storage outage: connection errors, not bugs met during one."""

from __future__ import annotations

import optuna
import pytest
import sqlalchemy
from sqlalchemy.exc import OperationalError

from automl.fleet.study_loop import storage_unreachable


def _read_from(url: str) -> int:
    with sqlalchemy.create_engine(url).connect() as connection:
        return connection.execute(sqlalchemy.text("SELECT 1")).scalar_one()


def _buggy_cleanup(url: str) -> int:
    try:
        value = _read_from(url)
    finally:
        seen = value  # unset when the read failed: a bug, whatever the read met
    return seen


def test_a_bug_met_while_handling_an_outage_is_not_taken_for_one(tmp_path):
    url = f"sqlite:///{tmp_path / 'gone' / 'studies.db'}"  # its folder does not exist
    with pytest.raises(OperationalError) as outage:
        _read_from(url)
    with pytest.raises(UnboundLocalError) as bug:
        _buggy_cleanup(url)

    assert storage_unreachable(outage.value)
    assert isinstance(bug.value.__context__, OperationalError)
    assert not storage_unreachable(bug.value)


def test_optuna_s_own_unbound_local_error_in_an_outage_is_the_outage_it_hides(tmp_path):
    # Telling the trial fails, and reading it back fails too: Optuna's `_run_trial` then
    # reads a variable it never set, in its `finally`.
    folder = tmp_path / "db"
    folder.mkdir()
    storage = optuna.storages.RDBStorage(f"sqlite:///{folder / 'studies.db'}")
    study = optuna.create_study(storage=storage)

    def objective(_trial: optuna.Trial) -> float:
        storage.engine.dispose()
        folder.rename(tmp_path / "moved")  # the database is gone while the trial runs
        return 1.0

    with pytest.raises(UnboundLocalError) as raised:
        study.optimize(objective, n_trials=1)

    assert storage_unreachable(raised.value)
