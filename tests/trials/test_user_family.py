"""A family the user wrote, named ``package.module:function`` in the space, runs a whole study."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import automl
from automl.inputs import synthetic

SPACE = """
name: user-dilated
output_layer: head
params:
  arch.family: {type: fixed, value: "user_families:dilated_conv"}
  arch.width: {type: categorical, choices: [16, 24]}  # pruned by blocks of 8 channels
  arch.depth: {type: fixed, value: 2}
  arch.extra.dilation: {type: categorical, choices: [1, 3]}
  pruning_ratio: {type: categorical, choices: [0.0, 0.5]}
  method: {type: categorical, choices: [fp32, int8-dynamic]}
  batch_size: {type: categorical, choices: [1, 8]}
  train.epochs: {type: fixed, value: 2}
  finetune_epochs: {type: fixed, value: 1}
"""


@pytest.mark.slow
def test_a_user_family_runs_a_study_end_to_end(tmp_path):
    (tmp_path / "space.yaml").write_text(SPACE)
    np.savez(tmp_path / "signals.npz", **synthetic.signals(n_train=120, n_test=40))
    result = automl.optimize(
        search_space=str(tmp_path / "space.yaml"),
        dataset=str(tmp_path / "signals.npz"),
        n_trials=4,
        name="user-family",
        storage=f"sqlite:///{tmp_path}/s.db",
        artifacts_dir=tmp_path / "artifacts",
        progress=False,
        remeasure=False,
    )
    trials = result.study.trials
    assert result.ended == "done"
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4
    archs = [t.user_attrs["candidate"]["arch"] for t in trials]
    assert {a["family"] for a in archs} == {"user_families:dilated_conv"}
    assert {a["output_layer"] for a in archs} == {"head"}
    assert all(a["extra"]["dilation"] in (1, 3) for a in archs)
    assert all(t.params["arch.extra.dilation"] == a["extra"]["dilation"]
               for t, a in zip(trials, archs, strict=True))  # fmt: skip
    pruned = [t for t in trials if t.params["pruning_ratio"] == 0.5]
    assert all(t.user_attrs["params"] < t.user_attrs["params_unpruned"] for t in pruned)
    best = result.front[0]["number"]
    result.export(best, tmp_path / "model.onnx")
    onnx.checker.check_model(str(tmp_path / "model.onnx"))
    sidecar = json.loads((tmp_path / "model.json").read_text())
    assert sidecar["candidate"]["arch"]["family"] == "user_families:dilated_conv"
