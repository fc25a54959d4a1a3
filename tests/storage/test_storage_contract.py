"""Optuna's own storage contract (``StorageTestCase``) run against every storage automl builds.

automl's storages subclass private parts of Optuna (its RDB storage and its trial cache), so
Optuna's contract suite is what tells us that they still keep Optuna's promises. A storage kind
is covered once it is listed in ``KINDS``, on SQLite and on PostgreSQL unless ``_DATABASES`` says
otherwise.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
from typing import TYPE_CHECKING

import optuna
import pytest
from conftest import pg_schema
from optuna.distributions import FloatDistribution
from optuna.storages._rdb.models import BaseModel, VersionInfoModel
from optuna.study import StudyDirection
from optuna.testing.pytest_storages import StorageTestCase

import automl.storage
from automl.settings import Settings
from automl.storage.factory import cached, open_storage

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from optuna.storages import BaseStorage

    from automl.storage.rdb import HeartbeatRDBStorage

# What automl builds on the storage that ``open_storage`` opens: the CLI reads it as it is, and
# the workers and the API read it through the trial cache.
KINDS: dict[str, Callable[[HeartbeatRDBStorage], BaseStorage]] = {
    "rdb": lambda opened: opened,
    "cached": cached,
}
# The RDB kind runs on SQLite only: on PostgreSQL the trial cache reaches each of its overrides
# that the contract calls (the create and the state change), and Optuna's CI runs the rest.
_DATABASES = {"rdb": ("sqlite",)}
# Optuna's tables less its version row: emptied between tests, children first.
_TABLES = [t for t in reversed(BaseModel.metadata.sorted_tables)
           if t.name != VersionInfoModel.__tablename__]  # fmt: skip


@pytest.fixture(scope="module")
def sqlite_storage(tmp_path_factory) -> Iterator[HeartbeatRDBStorage]:
    """One SQLite storage for the module: opening one takes 50 ms of CPU, creating it 0.5 s."""
    opened = open_storage(f"sqlite:///{tmp_path_factory.mktemp('contract')}/s.db", Settings())
    yield opened
    opened.engine.dispose()


@pytest.fixture(scope="module")
def postgresql_storage() -> Iterator[HeartbeatRDBStorage]:
    """One PostgreSQL schema and storage for the module.

    Its commits do not wait for the disk (a crash of the server could lose the last ones):
    Optuna's tests commit thousands of times.
    """
    with pg_schema() as url:
        opened = open_storage(f"{url}%20-csynchronous_commit%3Doff", Settings())
        yield opened
        opened.engine.dispose()


@pytest.fixture(
    params=[(k, d) for k in KINDS for d in _DATABASES.get(k, ("sqlite", "postgresql"))],
    ids="-".join,
)
def storage(request) -> BaseStorage:
    """An empty storage of each kind, on each database: the fixture Optuna's tests take.

    DELETE, not TRUNCATE: on tables this small PostgreSQL's TRUNCATE takes ten times longer.
    """
    kind, database = request.param
    opened = request.getfixturevalue(f"{database}_storage")
    with opened.engine.begin() as connection:
        for table in _TABLES:
            connection.execute(table.delete())
    return KINDS[kind](opened)


class TestOptunaStorageContract(StorageTestCase):
    """Every test of Optuna's ``StorageTestCase``, on the ``storage`` fixture above."""


def test_a_pickled_copy_reads_what_was_written_after_it(storage) -> None:
    """Optuna's pickle test reads study attrs only; a copy must not keep a trial as it was."""
    trial_id = storage.create_new_trial(storage.create_new_study([StudyDirection.MINIMIZE]))
    copied = pickle.loads(pickle.dumps(storage))
    storage.set_trial_param(trial_id, "x", 0.5, FloatDistribution(0, 1))
    assert copied.get_trial(trial_id).params == {"x": 0.5}


def test_every_storage_class_of_automl_is_a_listed_kind(sqlite_storage) -> None:
    """A new storage class in ``automl/storage/`` must be listed in ``KINDS`` to pass."""
    defined = set()
    for module in pkgutil.iter_modules(automl.storage.__path__, "automl.storage."):
        for _, cls in inspect.getmembers(importlib.import_module(module.name), inspect.isclass):
            if issubclass(cls, optuna.storages.BaseStorage) and cls.__module__ == module.name:
                defined.add(cls)
    built = {type(build(sqlite_storage)) for build in KINDS.values()}
    assert defined <= built, f"not in KINDS: {sorted(c.__name__ for c in defined - built)}"
