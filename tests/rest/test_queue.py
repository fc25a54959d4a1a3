from __future__ import annotations

import threading
import time

import numpy as np
import optuna
import pytest
from conftest import PgProxy, pg_schema

from automl.fleet.scheduler import runnable_studies, work
from automl.fleet.study_loop import GracefulStop
from automl.search.space import SEARCH_SPACES_DIR
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.service.studies import request_stop
from automl.storage.factory import cached, open_artifact_store, open_storage
from automl.storage.reaper import Reaper

pytest_plugins = ["api_fixtures"]


@pytest.fixture
def storage(api_settings, tmp_path):
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    return cached(open_storage(url, api_settings(url)))


def _create(storage, name: str, **spec: object) -> optuna.Study:
    return create_study(parse_spec({"name": name, "search_space": "digits-mlp", **spec}), storage)


def test_runnable_studies_are_queued_here_with_a_free_slot(storage, synthetic_trial):
    _create(storage, "queued", n_trials=2)
    _create(storage, "elsewhere", target="a100", search_space="digits-gpu", n_trials=2)
    _create(storage, "stopped", n_trials=2)
    request_stop("stopped", storage)
    _create(storage, "done", n_trials=1).add_trial(synthetic_trial(0, 0.9, 1.0))
    busy = _create(storage, "busy", n_trials=1)
    busy.enqueue_trial({})
    busy.ask()  # one RUNNING trial fills the only slot
    assert runnable_studies(storage) == ["queued"]


def test_work_returns_when_stopped(storage, api_settings, tmp_path):
    settings = api_settings(f"sqlite:///{tmp_path / 'queue.db'}")
    stop = GracefulStop()
    thread = threading.Thread(
        target=work,
        args=(storage,),
        kwargs={
            "artifact_store": open_artifact_store(settings),
            "settings": settings,
            "stop": stop,
            "poll_s": 30,
        },
    )
    thread.start()
    stop.requested = True
    thread.join(5)
    assert not thread.is_alive()


def test_worker_loop_and_reaper_ride_out_a_storage_outage(api_settings, tmp_path):
    with pg_schema() as direct_url:
        proxy = PgProxy()
        url = direct_url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
        settings = api_settings(url, heartbeat_interval_s=1, grace_period_s=2)
        storage = cached(open_storage(url, settings))
        stop = GracefulStop()
        kwargs = {"artifact_store": open_artifact_store(settings), "settings": settings}
        worker = threading.Thread(target=work, args=(storage,), kwargs={**kwargs, "stop": stop})
        worker.start()  # polls an empty queue
        reaper = Reaper(storage, interval_s=0.2).start()
        proxy.outage(2.5)
        assert worker.is_alive()
        study = _create(
            storage, "stale", n_trials=2, target="a100", search_space="digits-gpu"
        )  # no worker here runs it
        trial = study.ask()
        storage.record_heartbeat(trial._trial_id)  # then its worker dies
        deadline = time.monotonic() + 30
        while study.trials[0].state.name == "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.2)
        stop.requested = True
        worker.join(10)
        reaper.stop()
        assert study.trials[0].state.name == "FAIL"  # the reaper thread outlived the outage
        assert not worker.is_alive()


def test_a_study_this_worker_cannot_load_does_not_block_the_others(
    storage, api_settings, tmp_path, digits
):
    space = tmp_path / "gone.yaml"
    space.write_text((SEARCH_SPACES_DIR / "digits-mlp.yaml").read_text())
    _create(storage, "gone", search_space=str(space), n_trials=1)  # variants load the space
    _create(storage, "gone-1", search_space=str(space), n_trials=1, trials_per_model=1)
    data = tmp_path / "mine.npz"
    np.savez(data, **{k: getattr(digits, k) for k in ("x_train", "y_train", "x_test", "y_test")})
    _create(storage, "no-data", dataset=str(data), n_trials=1, trials_per_model=1)
    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_bytes(data.read_bytes())
    _create(storage, "corrupt", dataset=str(corrupt), n_trials=1, trials_per_model=1)
    space.unlink()  # e.g. submitted from a host whose files this worker does not have
    data.unlink()
    corrupt.write_bytes(corrupt.read_bytes()[:2000])  # half copied: np.load raises BadZipFile
    after = _create(storage, "after", n_trials=1)
    settings = api_settings(f"sqlite:///{tmp_path / 'queue.db'}")
    stop = GracefulStop()
    kwargs = {"artifact_store": open_artifact_store(settings), "settings": settings}
    worker = threading.Thread(
        target=work, args=(storage,),
        kwargs={**kwargs, "stop": stop, "exit_when_idle": True, "poll_s": 0.1},
    )  # fmt: skip
    worker.start()
    worker.join(120)
    stop.requested = True  # a worker stuck on the broken study would never return
    worker.join()
    assert after.trials[0].state.name == "COMPLETE"
    for name in ("gone", "gone-1", "no-data", "corrupt"):  # skipped, not failed for all
        assert optuna.load_study(study_name=name, storage=storage).trials == []


def test_a_study_that_could_not_run_here_is_tried_again_once_its_files_arrive(
    storage, api_settings, tmp_path
):
    space = tmp_path / "late.yaml"
    text = (SEARCH_SPACES_DIR / "digits-mlp.yaml").read_text()
    space.write_text(text)
    late = _create(storage, "late", search_space=str(space), n_trials=1, trials_per_model=1)
    space.unlink()  # not on this host yet
    settings = api_settings(f"sqlite:///{tmp_path / 'queue.db'}")
    stop = GracefulStop()
    kwargs = {"artifact_store": open_artifact_store(settings), "settings": settings}
    worker = threading.Thread(
        target=work, args=(storage,),
        kwargs={**kwargs, "stop": stop, "poll_s": 0.1, "recheck_s": 0.5},
    )  # fmt: skip
    worker.start()
    time.sleep(1.0)  # the worker has found the study unusable by now
    assert late.trials == []
    space.write_text(text)  # e.g. the shared volume is mounted
    deadline = time.monotonic() + 120
    while not late.trials or late.trials[0].state.name != "COMPLETE":
        assert time.monotonic() < deadline, "the worker never tried the study again"
        time.sleep(0.2)
    stop.requested = True
    worker.join()


def test_a_polling_worker_serves_other_studies_while_others_hold_the_last_trials(
    storage, api_settings, tmp_path
):
    held = _create(storage, "held", n_trials=2)
    elsewhere = held.ask()  # the last slot, held by a live worker on another host (below)
    other = _create(storage, "other", n_trials=1)
    settings = api_settings(f"sqlite:///{tmp_path / 'queue.db'}")
    stop = GracefulStop()
    kwargs = {"artifact_store": open_artifact_store(settings), "settings": settings}
    worker = threading.Thread(
        target=work, args=(storage,), kwargs={**kwargs, "stop": stop, "poll_s": 0.1}
    )
    worker.start()
    deadline = time.monotonic() + 120
    while (not other.trials or other.trials[0].state.name == "RUNNING") and (
        time.monotonic() < deadline
    ):
        storage.record_heartbeat(elsewhere._trial_id)  # that worker lives on
        time.sleep(0.2)
    stop.requested = True
    worker.join()
    assert [t.state.name for t in held.trials] == ["RUNNING", "COMPLETE"]
    assert other.trials[0].state.name == "COMPLETE"
