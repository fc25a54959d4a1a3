"""The top-level ``automl`` command: its help, its sub-commands, and the worker's errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def test_help_does_not_import_torch():
    code = "import sys, automl.cli; sys.argv=['automl','--help']\ntry:\n automl.cli.app()\nexcept SystemExit: pass\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("False")


def test_help_lists_the_commands_the_study_group_and_plugins(cli):
    top = cli("--help").stdout
    for name in ("targets", "methods", "worker", "dashboard", "serve", "study"):
        assert f"\n  {name} " in top, top
    study = cli("study", "--help").stdout
    for name in ("start", "list", "show", "pareto", "export", "compare", "report", "stop"):
        assert f"\n  {name} " in study, study


def test_worker_on_an_unreachable_storage_is_a_clear_error(cli):
    out = cli("worker", "--storage", "postgresql://automl@127.0.0.1:1/automl", check=False)
    assert out.returncode == 2 and "error: cannot open the storage" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_storage_of_an_older_optuna_says_how_to_upgrade_it(cli):
    import sqlalchemy

    from automl.settings import Settings
    from automl.storage.factory import open_storage

    open_storage(cli.storage, Settings()).engine.dispose()
    engine = sqlalchemy.create_engine(cli.storage)
    with engine.begin() as db:
        db.execute(sqlalchemy.text("UPDATE alembic_version SET version_num = 'v3.0.0.d'"))
    engine.dispose()
    out = cli("study", "list", check=False)
    assert out.returncode == 2 and "optuna storage upgrade --storage" in out.stderr
    assert "Traceback" not in out.stderr


def test_spaces_lists_every_shipped_space_one_line_each(cli):
    from automl.search.space import list_spaces

    done = cli("spaces")
    rows = [line for line in done.stdout.splitlines() if line.startswith("│")]
    assert [row.split("│")[1].strip() for row in rows] == list_spaces()
    listed = json.loads(cli("spaces", "--json").stdout)
    assert {s["name"] for s in listed} == set(list_spaces()) and all(
        s["description"] for s in listed
    )


def test_methods_lists_the_catalog_with_the_targets_that_run_each(cli):
    from automl.catalog import METHODS
    from automl.targets import load_target

    listed = json.loads(cli("methods", "--json").stdout)
    assert [m["name"] for m in listed] == list(METHODS)
    by_name = {m["name"]: m for m in listed}
    assert (
        "cpu" in by_name["int8-mixed"]["targets"] and "a100" not in by_name["int8-mixed"]["targets"]
    )
    for method in load_target("h100").methods:
        assert "h100" in by_name[method]["targets"]
    assert all(m["description"] and ":mod:" not in m["description"] for m in listed)
    assert "int8-mixed" in cli("methods").stdout


@pytest.mark.parametrize("command", ["", "study", "study start", "study export", "worker", "serve"])
def test_help_is_readable_at_80_columns(cli, command):
    cli.env["COLUMNS"] = "80"
    done = cli(*command.split(), "--help")
    said = done.stdout
    cut = [line for line in said.splitlines() if line.endswith("...") and "Usage" not in line]
    assert "…" not in said and not cut and "\\[" not in said, said  # nothing cut, no markup
    assert max(len(line) for line in done.stdout.splitlines()) <= 80


def test_a_storage_that_is_no_database_is_one_line_and_left_as_it_was(cli):
    (cli.root / "notes.txt").write_text("my notes\n")
    (cli.root / "empty.db").touch()
    for url, says in [
        ("sqlite:///notes.txt", "error: 'notes.txt' is not a SQLite database: give --storage"),
        ("notes.txt", "a SQLite file is given as sqlite:///notes.txt"),
        ("sqlite:///empty.db", "error: no storage at sqlite:///empty.db: the file is empty"),
    ]:
        out = cli("study", "list", "--storage", url, check=False)
        assert out.returncode == 2 and says in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert (cli.root / "notes.txt").read_text() == "my notes\n"
    assert (cli.root / "empty.db").stat().st_size == 0


def test_version_prints_the_package_version_without_importing_torch():
    from importlib.metadata import version

    code = "import sys, automl.cli; sys.argv=['automl','--version']\ntry:\n automl.cli.app()\nexcept SystemExit as e: print(e.code)\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [f"automl {version('automl')}", "0", "False"]
    done = subprocess.run(
        [sys.executable, "-m", "automl", "--version"], capture_output=True, text=True
    )
    assert (done.returncode, done.stdout) == (0, f"automl {version('automl')}\n")


def test_a_long_error_is_one_line_and_its_brackets_are_text(cli):
    path = cli.root / ("s" * 150 + "[bold]x[/bold].db")
    out = cli("study", "list", "--storage", f"sqlite:///{path}", check=False)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert (
        out.stderr.startswith("error: no storage at ") and f"'{path}' does not exist" in out.stderr
    )


def test_every_command_on_models_takes_artifacts_dir_and_a_worker_finds_them_by_its_storage(cli):
    import typer

    from automl.cli import app

    top = typer.main.get_command(app).commands
    for command in (top["worker"], top["dashboard"], *map(top["study"].commands.get,
                    ("start", "export", "report", "delete"))):  # fmt: skip
        assert "--artifacts-dir" in {o for p in command.params for o in p.opts}, command.name
    del cli.env["AUTOML_ARTIFACTS_DIR"]
    url = f"sqlite:///{cli.root}/fleet/s.db"
    beside = cli("worker", "--storage", url)  # no study: it exits at once
    assert f"models in '{cli.root / 'fleet' / 'artifacts'}'" in beside.stderr, beside.stderr
