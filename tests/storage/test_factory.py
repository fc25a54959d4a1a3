"""Storages as workers open them: new databases, bad URLs, the trial cache."""

from __future__ import annotations

import select
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import optuna
import pytest
import sqlalchemy
from conftest import pg_schema

from automl.errors import SpecError, StorageUnavailable
from automl.settings import Settings
from automl.storage.factory import TrialCache, cached, open_storage


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


# An opener imports first, then opens each database URL named on its stdin: the openers of a
# round start together, not seconds of imports apart.
OPENER = """
import sys
from automl.settings import Settings
from automl.storage.factory import open_storage

for url in sys.stdin:
    try:
        open_storage(url.strip(), Settings(storage=url.strip())).engine.dispose()
        print("ok", flush=True)
    except Exception as e:  # reported to the test
        print(f"{type(e).__name__}: {e}".replace("\\n", " "), flush=True)
"""


def _answer(opener: subprocess.Popen) -> str:
    ready, _, _ = select.select([opener.stdout], [], [], 120)
    return opener.stdout.readline().strip() if ready else "(no answer in 120 s)"


@pytest.mark.e2e  # processes of their own
def test_workers_starting_together_on_a_new_database_all_open_it():
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    openers = [
        subprocess.Popen([sys.executable, "-c", OPENER], text=True, **pipes) for _ in range(4)
    ]
    for _ in range(2):  # the race to create the tables is lost by most openers, most times
        with pg_schema() as url:
            for opener in openers:
                opener.stdin.write(f"{url}\n")
                opener.stdin.flush()
            outcomes = [_answer(opener) for opener in openers]
            assert outcomes == ["ok"] * 4, [o.communicate(timeout=120) for o in openers]
    outputs = [opener.communicate(timeout=120) for opener in openers]
    assert [opener.returncode for opener in openers] == [0] * 4, outputs


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


def test_a_read_only_open_never_creates_a_sqlite_file(tmp_path):
    missing = tmp_path / "typo" / "automl.db"
    with pytest.raises(StorageUnavailable, match=r"no storage at .*does not exist"):
        open_storage(f"sqlite:///{missing}", Settings(), create=False)
    assert not missing.parent.exists()
    open_storage(f"sqlite:///{missing}", Settings())
    assert missing.is_file()
    open_storage(f"sqlite:///{missing}", Settings(), create=False)


def _set_up_by(url: str, revision: str, library_version: str) -> None:
    """Mark a storage's tables as an older (or newer) Optuna's, as that Optuna leaves them."""
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as db:
        db.execute(sqlalchemy.text("UPDATE alembic_version SET version_num = :v"), {"v": revision})
        db.execute(sqlalchemy.text("UPDATE version_info SET library_version = :v"),
                   {"v": library_version})  # fmt: skip
    engine.dispose()


@pytest.mark.parametrize(
    ("revision", "says"),
    [
        (
            "v3.0.0.d",
            r"set up by Optuna 3\.1\.1, older .*optuna storage upgrade --storage 'sqlite:///",
        ),
        ("v99.0.0", r"set up by Optuna 3\.1\.1, which this Optuna .* cannot read"),
    ],
)
def test_tables_of_another_optuna_version_are_one_clear_error(tmp_path, revision, says):
    url = f"sqlite:///{tmp_path}/old.db"
    open_storage(url, Settings()).engine.dispose()
    _set_up_by(url, revision, "3.1.1")
    with pytest.raises(StorageUnavailable, match=says):
        open_storage(url, Settings())


@pytest.mark.parametrize("create", [True, False])
def test_a_file_that_is_no_sqlite_database_is_refused_and_left_as_it_was(tmp_path, create):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with pytest.raises(SpecError, match=r"'.*notes\.txt' is not a SQLite database: give --storage"):
        open_storage(f"sqlite:///{notes}", Settings(), create=create)
    assert notes.read_text() == "my notes\n"


def test_an_empty_file_is_no_storage_to_read_but_may_become_a_new_one(tmp_path):
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(StorageUnavailable, match=r"no storage at sqlite:///.*: the file is empty"):
        open_storage(f"sqlite:///{empty}", Settings(), create=False)
    assert empty.stat().st_size == 0  # no tables were written into it
    open_storage(f"sqlite:///{empty}", Settings()).engine.dispose()  # a study may start there
    open_storage(f"sqlite:///{empty}", Settings(), create=False).engine.dispose()


def test_a_reader_writes_no_tables_into_another_programs_database(tmp_path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
    db.close()
    with pytest.raises(StorageUnavailable, match="a SQLite database without Optuna's tables"):
        open_storage(f"sqlite:///{other}", Settings(), create=False)
    with sqlite3.connect(other) as db:
        tables = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    db.close()
    assert tables == [("notes",)]


def test_no_command_writes_optunas_tables_into_another_programs_database(tmp_path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (a)")
    db.close()
    with pytest.raises(SpecError) as refused:
        open_storage(f"sqlite:///{other}", Settings(), create=True)
    assert str(refused.value) == (
        f"{str(other)!r} is a SQLite database of another program (tables: t): give --storage "
        "(or AUTOML_STORAGE) a new file or a storage that automl made"
    )
    with sqlite3.connect(other) as db:
        tables = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    db.close()
    assert tables == [("t",)]


_OPEN_AS_NOBODY = """
import os, sys
from automl.errors import StorageUnavailable
from automl.settings import Settings
from automl.storage.factory import open_storage
if os.geteuid() == 0:  # root reads through permission bits
    os.setuid(65534)
try:
    open_storage(sys.argv[1], Settings(), create=sys.argv[2] == "1")
except StorageUnavailable as e:
    print(e)
"""


@pytest.mark.parametrize("create", [True, False])
def test_a_storage_file_this_user_may_not_read_is_one_clear_error(create):
    with tempfile.TemporaryDirectory() as folder:
        Path(folder).chmod(0o755)  # nobody may enter it
        url = f"sqlite:///{folder}/x.db"
        open_storage(url, Settings()).engine.dispose()
        Path(folder, "x.db").chmod(0)
        done = subprocess.run([sys.executable, "-c", _OPEN_AS_NOBODY, url, str(int(create))],
                              capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert done.stdout == (
        f"cannot read the storage {url}: Permission denied; check its permissions, or give "
        "--storage (or AUTOML_STORAGE) another database\n"
    )


@pytest.mark.parametrize("create", [True, False])
def test_a_damaged_sqlite_file_is_one_clear_error(tmp_path, create):
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 32)
    with pytest.raises(StorageUnavailable, match=r"cannot read the storage .*restore it from"):
        open_storage(f"sqlite:///{damaged}", Settings(), create=create)


def test_a_bare_path_is_told_how_to_name_a_sqlite_file():
    with pytest.raises(SpecError, match=r"a SQLite file is given as sqlite:///studies/a\.db"):
        open_storage("studies/a.db", Settings())
