"""A host that cannot measure the target stops its loop at the first such trial."""

from __future__ import annotations

import optuna
import pytest

from automl.errors import TargetUnavailable
from automl.fleet.study_loop import run_study_loop
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.settings import Settings
from automl.storage.factory import open_artifact_store, open_storage
from automl.trials import objective


def test_a_trial_the_host_cannot_measure_fails_once_and_stops_the_loop(tmp_path, monkeypatch):
    # The start check passes (as if the GPU were there when the worker started); each trial
    # checks again, and finds no A100: the GPU is gone, or was never there.
    monkeypatch.setattr(objective, "require_present", lambda target, methods=(): None)
    monkeypatch.setattr(objective, "require_pinned_gpu", lambda target: None)
    settings = Settings(storage=f"sqlite:///{tmp_path}/s.db", artifacts_dir=tmp_path / "art")
    storage = open_storage(settings.storage, settings)
    spec = {"name": "g", "search_space": "digits-gpu", "target": "a100", "n_trials": 3}
    create_study(parse_spec(spec), storage, check_data=False)

    with pytest.raises(TargetUnavailable, match="needs a whole NVIDIA GPU"):
        run_study_loop("g", storage, artifact_store=open_artifact_store(settings),
                       settings=settings)  # fmt: skip

    (trial,) = optuna.load_study(study_name="g", storage=storage).trials
    assert trial.state.name == "FAIL"  # one, not ten: the study goes on for other hosts
    assert trial.user_attrs["fail_reason"].startswith("TargetUnavailable: target 'a100'")
