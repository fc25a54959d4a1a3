"""``automl study delete``: asked on a terminal, refused without one unless --yes."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.settings import Settings
from automl.storage.factory import open_storage


@pytest.fixture
def study(cli):
    """Study ``doomed`` in the CLI's storage, with a COMPLETE trial whose model is on disk;
    yields the study and the model's file."""
    folder = Path(cli.env["AUTOML_ARTIFACTS_DIR"])
    folder.mkdir()
    storage = open_storage(cli.storage, Settings(storage=cli.storage, artifacts_dir=folder))
    spec = parse_spec({"name": "doomed", "search_space": "digits-mlp", "n_trials": 3})
    study = create_study(spec, storage, check_data=False)
    (folder / "model-1").write_bytes(b"onnx")
    trial = study.ask()
    trial.set_user_attr("artifact_id", "model-1")
    study.tell(trial, [0.9, 0.02])
    yield study, folder / "model-1"
    storage.engine.dispose()


def _names(cli) -> list[str]:
    return [s.study_name for s in optuna.get_all_study_summaries(cli.storage)]


def test_without_a_terminal_and_without_yes_nothing_is_deleted(cli, study):
    _, model = study
    done = cli("study", "delete", "doomed", check=False)  # stdin is /dev/null, as in CI
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "give --yes" in done.stderr
    assert "Traceback" not in done.stderr
    assert _names(cli) == ["doomed"] and model.exists()


def test_yes_deletes_the_study_and_its_models(cli, study):
    _, model = study
    done = cli("study", "delete", "doomed", "--yes")
    assert "Deleted study 'doomed': 1 trial(s) and 1 model file(s)" in done.stdout
    assert _names(cli) == [] and not model.exists()
    missing = cli("study", "delete", "doomed", "--yes", check=False)
    assert missing.returncode == 2 and "no study named 'doomed'" in missing.stderr


def test_on_a_terminal_it_asks_and_a_no_keeps_the_study(cli, study):
    _, model = study
    declined = _on_a_terminal(cli, "n\n")
    assert "Delete study 'doomed': 1 trial(s) and 1 model file(s)?" in declined.stdout
    assert declined.returncode == 1 and "Kept study 'doomed'" in declined.stdout
    assert _names(cli) == ["doomed"] and model.exists()
    accepted = _on_a_terminal(cli, "y\n")
    assert accepted.returncode == 0, accepted.stderr
    assert _names(cli) == [] and not model.exists()


def test_a_study_with_running_trials_is_refused_with_how_to_stop_it(cli, study):
    running, _ = study
    running.ask()  # its one heartbeat must not go stale while a busy host starts the command
    cli.env["AUTOML_GRACE_PERIOD_S"] = "600"
    done = cli("study", "delete", "doomed", "--yes", check=False)
    assert done.returncode == 2
    assert "running trial(s) (1); stop it first with `automl study stop doomed`" in done.stderr
    assert _names(cli) == ["doomed"]


def _on_a_terminal(cli, answer: str) -> subprocess.CompletedProcess:
    """``automl study delete doomed`` with a terminal as its stdin, answering ``answer``."""
    parent, child = pty.openpty()
    try:
        os.write(parent, answer.encode())
        return subprocess.run(
            [sys.executable, "-m", "automl", "study", "delete", "doomed"],
            cwd=cli.root, env=cli.env, stdin=child, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(child)
        os.close(parent)


def test_the_artifacts_dir_option_is_where_the_models_are_deleted(cli, study):
    _, model = study
    cli.env["AUTOML_ARTIFACTS_DIR"] = str(cli.root / "elsewhere")  # the option comes first
    folder = str(model.parent)
    done = cli("study", "delete", "doomed", "--yes", "--artifacts-dir", folder)
    assert "1 model file(s)" in done.stdout and "already gone" not in done.stdout
    assert not model.exists()
