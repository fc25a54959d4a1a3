"""The objective on a real full disk: the trial fails in one line, and its worker stops; and
the space it draws from for a trained model."""

from __future__ import annotations

import tempfile

import optuna
import pytest
from disks import fill, tmpfs

from automl.errors import DiskFull, InputRefused
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
_MIXED = """name: mixed
params:
  method: {type: categorical, choices: [fp32, int8-mixed]}
  keep_fp32: {type: int, low: %d, high: 4, when: {method: [int8-mixed]}}
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


def test_a_trained_models_trials_draw_keep_fp32_below_its_layer_count(
    env, tmp_path, exported_models
):
    _settings, _storage, artifact_store = env
    model = {"weights": str(exported_models["mlp"])}  # two layers: Gemm, Gemm
    space = tmp_path / "space.yaml"
    space.write_text(_MIXED % 1)
    spec = parse_spec({"name": "mixed", "model": model, "search_space": str(space)})
    objective = StudyObjective(spec, artifact_store)
    objective.check_inputs()
    assert objective.space.params["keep_fp32"].high == 1  # 2 would keep both: the fp32 graph
    # A detached study's worker refuses a space whose every count keeps both.
    space.write_text(_MIXED % 2)
    with pytest.raises(InputRefused, match=r"keep_fp32 \[2, 3, 4\] keeps all 2 layers"):
        StudyObjective(spec, artifact_store).check_inputs()
