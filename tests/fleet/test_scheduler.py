"""The worker's queue: one study that breaks is set aside, and the worker serves the others."""

from __future__ import annotations

import flaky_model
import pytest
import torch

from automl.fleet.scheduler import work
from automl.fleet.signals import GracefulStop
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.service.studies import get_study
from automl.storage.factory import cached

QUICK = """name: quick
params:
  arch.family: {type: fixed, value: mlp}
  arch.width: {type: fixed, value: 16}
  arch.depth: {type: fixed, value: 1}
  bits: {type: fixed, value: 32}
  batch_size: {type: fixed, value: 1}
  train.epochs: {type: fixed, value: 1}
"""


def _flaky_weights(path) -> str:
    torch.save(flaky_model.build().state_dict(), path)
    return str(path)


def _bad_then_good(storage, tmp_path, factory: str) -> None:
    """Study ``bad`` of a model made by ``flaky_model:<factory>``, then study ``good``."""
    model = {"factory": f"flaky_model:{factory}", "weights": _flaky_weights(tmp_path / "f.pt")}
    bad = {"name": "bad", "search_space": "trained-model", "n_trials": 2, "model": model}
    create_study(parse_spec(bad), storage, check_data=False)
    (tmp_path / "quick.yaml").write_text(QUICK)
    good = {"name": "good", "search_space": str(tmp_path / "quick.yaml"), "n_trials": 1}
    create_study(parse_spec(good), storage, check_data=False)  # after the bad one: served later


def _work_until_idle(env) -> int:
    """Run a real worker over the storage of ``env`` until no study has work left."""
    settings, storage, store = env
    return work(
        cached(storage), artifact_store=store, settings=settings, stop=GracefulStop(),
        exit_when_idle=True, poll_s=0.1,
    )  # fmt: skip


def test_a_study_whose_input_check_raises_unexpectedly_fails_alone_and_the_worker_goes_on(
    env, tmp_path, caplog
):
    storage = env[1]
    _bad_then_good(storage, tmp_path, "build")

    with caplog.at_level("INFO", logger="automl"):
        ran = _work_until_idle(env)

    assert ran == 1
    failed = get_study("bad", storage)
    assert failed.state == "failed"
    assert failed.error.startswith("checking the inputs of study 'bad' failed unexpectedly (")
    assert "LookupError: codebook exhausted after one batch)" in failed.error
    assert "\n" not in failed.error
    assert get_study("good", storage).counts["COMPLETE"] == 1
    (logged,) = [r for r in caplog.records if "checking its inputs raised" in r.getMessage()]
    assert logged.exc_info is not None  # the traceback, for the operator


def test_a_study_whose_weights_file_is_empty_fails_and_the_worker_goes_on(env, tmp_path):
    storage = env[1]
    (tmp_path / "empty.pt").write_bytes(b"")
    model = {"factory": "trained_factories:digits_cnn", "weights": str(tmp_path / "empty.pt")}
    bad = {"name": "bad", "search_space": "trained-model", "n_trials": 2, "model": model}
    create_study(parse_spec(bad), storage, check_data=False)
    (tmp_path / "quick.yaml").write_text(QUICK)
    good = {"name": "good", "search_space": str(tmp_path / "quick.yaml"), "n_trials": 1}
    create_study(parse_spec(good), storage, check_data=False)

    ran = _work_until_idle(env)

    assert ran == 1
    failed = get_study("bad", storage)
    assert (failed.state, failed.error) == (
        "failed",
        f"weights file {str(tmp_path / 'empty.pt')!r} is empty (0 bytes): save it with "
        "torch.save(model.state_dict(), path)",
    )
    assert get_study("good", storage).counts["COMPLETE"] == 1


@pytest.mark.parametrize(
    ("factory", "said"),
    [
        ("disk_error", "(OSError: [Errno 5] Input/output error: 'codebook.bin')"),
        ("numpy_out_of_memory", "(MemoryError: Unable to allocate 8.00 PiB"),
        ("torch_out_of_memory", "(RuntimeError: [enforce fail at alloc_cpu.cpp"),
        ("out_of_memory_at_once", "(MemoryError: Unable to allocate 8.00 PiB"),
    ],
)
def test_a_study_whose_input_check_fails_on_this_host_stays_queued_and_the_worker_goes_on(
    env, tmp_path, caplog, factory, said
):
    # Out of memory or a disk error on one host must not fail the study for every host.
    storage = env[1]
    _bad_then_good(storage, tmp_path, factory)

    with caplog.at_level("INFO", logger="automl"):
        ran = _work_until_idle(env)

    assert ran == 1
    assert get_study("good", storage).counts["COMPLETE"] == 1
    queued = get_study("bad", storage)
    assert (queued.state, queued.error) == ("queued", None)
    (logged,) = [r for r in caplog.records if "cannot run on this worker" in r.getMessage()]
    assert "checking the inputs of study 'bad' failed on this host " + said in logged.getMessage()
    assert "the study stays queued for other workers" in logged.getMessage()
