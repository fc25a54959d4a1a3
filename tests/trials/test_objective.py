"""The objective on a real full disk: the trial fails in one line, and its worker stops."""

from __future__ import annotations

import tempfile

import optuna
import pytest
from disks import fill, tmpfs

from automl.errors import DiskFull
from automl.records import FAIL_REASON
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.trials.objective import DISK_FULL, StudyObjective

_SPACE = """name: small
params:
  arch.family: {type: fixed, value: mlp}
  arch.width: {type: fixed, value: 16}
  arch.depth: {type: fixed, value: 1}
  batch_size: {type: fixed, value: 1}
  train.epochs: {type: fixed, value: 1}
"""


@pytest.mark.slow  # one trial
def test_a_full_temporary_folder_fails_the_trial_in_one_line_and_stops_the_worker(
    env, tmp_path, monkeypatch
):
    _settings, storage, artifact_store = env
    (tmp_path / "space.yaml").write_text(_SPACE)
    spec = parse_spec({"name": "full", "search_space": str(tmp_path / "space.yaml")})
    study = create_study(spec, storage)
    objective = StudyObjective(spec, artifact_store)
    with tmpfs(tmp_path / "tmp", size_kb=64) as folder:
        fill(folder, leave_kb=0)  # where the trial's model is exported and quantized
        monkeypatch.setattr(tempfile, "tempdir", str(folder))
        study.optimize(objective, n_trials=1, catch=(Exception,))
    trial = study.trials[0]
    assert trial.state == optuna.trial.TrialState.FAIL
    assert trial.user_attrs[FAIL_REASON] == f"DiskFull: {DISK_FULL}"
    assert isinstance(objective.unavailable, DiskFull)  # the study loop raises it: no next trial
