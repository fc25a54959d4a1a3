"""The storage contract: every backend a study may live in behaves alike through our functions.

In memory (Optuna's own), SQLite, SQLite behind the trial cache, and PostgreSQL.
"""

from __future__ import annotations

import warnings

import optuna
import pytest
from conftest import pg_schema
from optuna.trial import TrialState

from automl.records import constraint_attrs
from automl.settings import Settings
from automl.storage.capabilities import (
    BatchedStorage,
    count_states,
    count_taken,
    set_trial_attrs,
)
from automl.storage.factory import cached, open_storage

BACKENDS = ("memory", "sqlite", "sqlite-cached", "postgresql")


@pytest.fixture(params=BACKENDS)
def storage(request, tmp_path):
    """A new, empty storage of each backend."""
    if request.param == "memory":
        yield optuna.storages.InMemoryStorage()
        return
    if request.param == "postgresql":
        with pg_schema() as url:
            opened = open_storage(url, Settings())
            yield opened
            opened.engine.dispose()
        return
    opened = open_storage(f"sqlite:///{tmp_path / 's.db'}", Settings())
    yield cached(opened) if request.param == "sqlite-cached" else opened


def _study(storage) -> optuna.Study:
    study = optuna.create_study(storage=storage, directions=["maximize", "minimize"])
    study.set_metric_names(["accuracy", "latency_per_sample_ms"])
    return study


def test_our_backends_declare_the_batched_capabilities(storage) -> None:
    assert isinstance(storage, BatchedStorage) == (not isinstance(
        storage, optuna.storages.InMemoryStorage
    ))  # fmt: skip


def test_attrs_and_constraints_read_back_as_optuna_reads_them(storage) -> None:
    study = _study(storage)
    trial = study.ask()
    user = {"accuracy": 0.9, "latency": {"p50_ms": 0.1, "runs": 50}, "feasible": False}
    set_trial_attrs(storage, trial._trial_id, user, constraint_attrs([-1.0, 2.5]))
    study.tell(trial, [0.9, 0.01])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "Overwrite an old format constraint"
        (stored,) = study.get_trials()
        assert stored.user_attrs == user
        assert stored.constraints == {"0": -1.0, "1": 2.5}
        assert stored.values == [0.9, 0.01]  # raw values, as measured
        assert study.best_trials == []  # its only trial is infeasible


def test_counts_match_the_trials(storage) -> None:
    study = _study(storage)
    for values in ([0.9, 0.1], [0.8, 0.05]):
        trial = study.ask()
        study.tell(trial, values)
    study.tell(study.ask(), state=TrialState.FAIL)
    study.enqueue_trial({})
    running = study.ask()  # takes the enqueued trial
    later = study.ask()

    counts, started = count_states(storage, study._study_id)
    trials = study.get_trials()
    for state in ("COMPLETE", "FAIL", "RUNNING", "WAITING", "PRUNED"):
        assert counts[state] == sum(t.state.name == state for t in trials), state
    assert started == min(t.datetime_start for t in trials if t.datetime_start)
    assert count_taken(storage, study._study_id, later.number) == 3  # 2 complete, 1 before it
    assert count_taken(storage, study._study_id, running.number) == 2


def _create_after(barrier, engine, errors: list) -> None:
    from automl.storage import tables

    barrier.wait()
    try:
        tables.ensure_tables(engine)
    except Exception as e:  # what a 500 of the API was made of
        errors.append(e)


def test_many_first_creators_of_our_tables_all_get_them(tmp_path) -> None:
    """Threads that create our tables at once in a new database: none fails, all see them."""
    import threading

    from sqlalchemy import create_engine, inspect

    from automl.storage import tables

    for round_ in range(8):
        url = f"sqlite:///{tmp_path}/race-{round_}.db"
        engines = [create_engine(url) for _ in range(6)]
        barrier, errors = threading.Barrier(len(engines)), []
        threads = [
            threading.Thread(target=_create_after, args=(barrier, engine, errors))
            for engine in engines
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        tables._ready.discard(url)
        assert not errors, errors
        assert all(inspect(engines[0]).has_table(t) for t in tables.METADATA.tables)
