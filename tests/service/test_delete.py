from __future__ import annotations

import time

import optuna
import pytest
from optuna.artifacts import upload_artifact

from automl.errors import SpecError
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.service.delete import StudyRunning, delete_study, plan_deletion
from automl.service.studies import StudyNotFound, load
from automl.service.submissions import submit_study
from automl.settings import Settings
from automl.storage.factory import open_artifact_store, open_storage

SPEC = {"name": "gone", "search_space": "digits-mlp", "n_trials": 5}


@pytest.fixture
def stores(storage_url, tmp_path):
    """A storage (SQLite, then PostgreSQL) with quick heartbeats, and an artifact store."""
    settings = Settings(
        storage=storage_url,
        artifacts_dir=tmp_path / "art",
        heartbeat_interval_s=1,
        grace_period_s=2,
    )
    storage = open_storage(storage_url, settings)
    yield storage, open_artifact_store(settings), settings.artifacts_dir
    storage.engine.dispose()


def _finished_trial(study: optuna.Study, store, model, state=optuna.trial.TrialState.COMPLETE):
    """A trial that uploaded ``model``: COMPLETE with its ``artifact_id``, or FAIL after its
    upload (only Optuna's own record of the upload names it)."""
    trial = study.ask()
    artifact_id = upload_artifact(artifact_store=store, file_path=str(model), study_or_trial=trial)
    if state == optuna.trial.TrialState.COMPLETE:
        trial.set_user_attr("artifact_id", artifact_id)
        study.tell(trial, [0.9, 0.02])
    else:
        trial.set_user_attr("fail_reason", "TrialFailed: boom")
        study.tell(trial, state=state)
    return artifact_id


def test_a_delete_removes_the_study_its_trials_and_its_models_only(stores, tmp_path):
    storage, store, folder = stores
    model = tmp_path / "m.onnx"
    model.write_bytes(b"onnx")
    other = create_study(parse_spec({**SPEC, "name": "kept"}), storage, check_data=False)
    kept = _finished_trial(other, store, model)
    study = create_study(parse_spec(SPEC), storage, check_data=False)
    ids = {
        _finished_trial(study, store, model),
        _finished_trial(study, store, model, optuna.trial.TrialState.FAIL),
    }

    done = delete_study("gone", storage, store)

    assert (done.trials, done.artifacts, done.missing) == (2, ids, 0)
    assert sorted(p.name for p in folder.iterdir()) == [kept]
    with pytest.raises(StudyNotFound):
        load("gone", storage)
    assert len(load("kept", storage)[0].trials) == 1
    again = create_study(parse_spec(SPEC), storage, check_data=False)  # the name is free
    assert again.trials == []
    with pytest.raises(StudyNotFound):
        delete_study("nope", storage, store)


def test_a_second_delete_after_a_half_done_one_finishes_it(stores, tmp_path):
    storage, store, folder = stores
    model = tmp_path / "m.onnx"
    model.write_bytes(b"onnx")
    study = create_study(parse_spec(SPEC), storage, check_data=False)
    first = _finished_trial(study, store, model)
    _finished_trial(study, store, model)
    (folder / first).unlink()  # a delete that stopped after its first model
    assert delete_study("gone", storage, store).missing == 1
    assert list(folder.iterdir()) == []


def test_running_trials_refuse_the_delete_until_they_finish(stores, tmp_path):
    storage, store, folder = stores
    model = tmp_path / "m.onnx"
    model.write_bytes(b"onnx")
    study = create_study(parse_spec(SPEC), storage, check_data=False)
    _finished_trial(study, store, model)
    running = study.ask()  # a live worker's: its first heartbeat is written with it

    with pytest.raises(StudyRunning) as refused:
        delete_study("gone", storage, store)
    assert "1 running trial(s) (1)" in str(refused.value)
    assert "`automl study stop gone`" in str(refused.value)
    assert len(list(folder.iterdir())) == 1 and len(load("gone", storage)[0].trials) == 2

    study.tell(running, [0.9, 0.03])
    assert delete_study("gone", storage, store).trials == 2


def test_a_running_trial_whose_worker_died_does_not_hold_the_delete(stores):
    storage, store, _ = stores
    study = create_study(parse_spec(SPEC), storage, check_data=False)
    study.ask()  # its worker dies: no heartbeat after the first
    time.sleep(2.2)  # the grace period
    assert plan_deletion("gone", storage).trials == 1
    assert delete_study("gone", storage, store).trials == 1


def test_a_study_that_automl_did_not_create_is_left_alone(stores):
    storage, store, _ = stores
    optuna.create_study(study_name="foreign", storage=storage)
    with pytest.raises(SpecError, match="not created by automl"):
        delete_study("foreign", storage, store)
    assert optuna.load_study(study_name="foreign", storage=storage).study_name == "foreign"


def test_the_request_that_created_a_deleted_study_creates_it_again(stores):
    storage, store, _ = stores
    spec = parse_spec(SPEC)
    submit = {"name_given": True, "idempotency_key": "k-1"}
    assert submit_study(spec, storage, **submit) == ("gone", True)
    delete_study("gone", storage, store)
    started = time.monotonic()
    # Its key's claim went with the study: no wait for a study that will never come back.
    assert submit_study(spec, storage, **submit) == ("gone", True)
    assert time.monotonic() - started < 5
    assert submit_study(spec, storage, **submit) == ("gone", False)  # a retry replays it
