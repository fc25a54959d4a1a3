"""``run_local``: this process and its helper processes on one study."""

from __future__ import annotations

import io
from pathlib import Path

import optuna
import pytest
from rich.console import Console

from automl.errors import TargetUnavailable
from automl.fleet.local import UNAVAILABLE, resume_command, run_local
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.settings import get_settings
from automl.storage.factory import open_storage
from automl.trials import objective


@pytest.mark.slow  # a helper process runs a whole study
def test_job_0_that_cannot_measure_leaves_the_study_to_the_other_jobs(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path}/s.db"
    monkeypatch.setenv("AUTOML_STORAGE", url)  # the helper reads its settings as a worker does
    monkeypatch.setenv("AUTOML_ARTIFACTS_DIR", str(tmp_path / "artifacts"))
    get_settings.cache_clear()

    def gone(target, methods=()):
        raise TargetUnavailable(f"target {target.name!r}: its device is gone from this process")

    # This process only: the helper is spawned, and imports the real check.
    monkeypatch.setattr(objective, "require_present", gone)
    storage = open_storage(url, get_settings())
    create_study(parse_spec({"name": "j", "search_space": "digits-mlp", "n_trials": 3}), storage)
    console = Console(file=io.StringIO(), width=300)
    try:
        ended = run_local("j", storage, storage_url=url, environments=[{}, {}], console=console)
    finally:
        get_settings.cache_clear()

    assert ended.reason == UNAVAILABLE  # the CLI then exits 3
    states = [t.state.name for t in optuna.load_study(study_name="j", storage=storage).trials]
    assert states.count("COMPLETE") == 3  # the helper ran the study to its end
    out = console.file.getvalue()
    assert "error: job 0: target 'cpu': its device is gone from this process" in out
    assert "run by the other jobs" in out


def test_the_resume_command_repeats_the_storage_and_the_artifacts_folder_given():
    given = resume_command(
        "s", "postgresql://u:pw@db/automl", 2, artifacts_dir=Path("/srv/my models")
    )
    assert given == (
        "automl study start --name s --storage 'postgresql://u:***@db/automl' "
        "--artifacts-dir '/srv/my models' --jobs 2"
    )
    assert resume_command("s", None, detach=True) == "automl study start --name s --detach"
