"""The worker's queue: one study that breaks is set aside, and the worker serves the others."""

from __future__ import annotations

import importlib

import torch

from automl.fleet.scheduler import work
from automl.fleet.signals import GracefulStop
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.service.studies import get_study
from automl.storage.factory import cached

# A model that runs once and then raises: the user's code fails where the check expects nothing
# to fail (finding its output layer runs it a second time), with an error of no kind it knows.
FLAKY = """
from torch import nn


class Flaky(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 10)
        self.runs = 0

    def forward(self, x):
        self.runs += 1
        if self.runs > 1:
            raise LookupError("codebook exhausted after one batch")
        return self.fc(x.flatten(1))


def build():
    return Flaky()
"""
QUICK = """name: quick
params:
  arch.family: {type: fixed, value: mlp}
  arch.width: {type: fixed, value: 16}
  arch.depth: {type: fixed, value: 1}
  bits: {type: fixed, value: 32}
  batch_size: {type: fixed, value: 1}
  train.epochs: {type: fixed, value: 1}
"""


def test_a_study_whose_input_check_raises_unexpectedly_fails_alone_and_the_worker_goes_on(
    env, tmp_path, monkeypatch, caplog
):
    settings, storage, store = env
    (tmp_path / "flaky_model.py").write_text(FLAKY)
    monkeypatch.syspath_prepend(str(tmp_path))
    torch.save(importlib.import_module("flaky_model").build().state_dict(), tmp_path / "f.pt")
    model = {"factory": "flaky_model:build", "weights": str(tmp_path / "f.pt")}
    bad = {"name": "bad", "search_space": "trained-model", "n_trials": 2, "model": model}
    create_study(parse_spec(bad), storage, check_data=False)
    (tmp_path / "quick.yaml").write_text(QUICK)
    good = {"name": "good", "search_space": str(tmp_path / "quick.yaml"), "n_trials": 1}
    create_study(parse_spec(good), storage, check_data=False)  # after the bad one: served later

    with caplog.at_level("INFO", logger="automl"):
        ran = work(
            cached(storage), artifact_store=store, settings=settings, stop=GracefulStop(),
            exit_when_idle=True, poll_s=0.1,
        )  # fmt: skip

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
    settings, storage, store = env
    (tmp_path / "empty.pt").write_bytes(b"")
    model = {"factory": "trained_factories:digits_cnn", "weights": str(tmp_path / "empty.pt")}
    bad = {"name": "bad", "search_space": "trained-model", "n_trials": 2, "model": model}
    create_study(parse_spec(bad), storage, check_data=False)
    (tmp_path / "quick.yaml").write_text(QUICK)
    good = {"name": "good", "search_space": str(tmp_path / "quick.yaml"), "n_trials": 1}
    create_study(parse_spec(good), storage, check_data=False)

    ran = work(
        cached(storage), artifact_store=store, settings=settings, stop=GracefulStop(),
        exit_when_idle=True, poll_s=0.1,
    )  # fmt: skip

    assert ran == 1
    failed = get_study("bad", storage)
    assert (failed.state, failed.error) == (
        "failed",
        f"weights file {str(tmp_path / 'empty.pt')!r} is empty (0 bytes): save it with "
        "torch.save(model.state_dict(), path)",
    )
    assert get_study("good", storage).counts["COMPLETE"] == 1
