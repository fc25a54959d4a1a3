"""Every family through a whole trial: train, prune, export, each method of the CPU target,
evaluate and measure, on the data it takes."""

from __future__ import annotations

import pytest
from family_cases import FAMILY_CASES

from automl.candidate import Candidate, TrainConfig
from automl.targets import load_target
from automl.trials.stage_cache import StageCache
from automl.trials.trial import run_trial

pytest_plugins = ["family_data"]
CPU = load_target("cpu")
# One process runs a family's tests, in order: its first method builds the model the others
# reuse. The families share nothing, so two processes share them out.
FAMILIES = [
    pytest.param(case, marks=pytest.mark.xdist_group(f"family-{case}")) for case in FAMILY_CASES
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> StageCache:
    """Shared by the methods of a family: it trains, prunes and exports once."""
    return StageCache(tmp_path_factory.mktemp("stage-cache"), 200 * 1024 * 1024)


@pytest.mark.slow
@pytest.mark.parametrize("method", CPU.methods)
@pytest.mark.parametrize("case", FAMILIES)
def test_a_trial_of_each_family_runs_each_cpu_method(family_data, cache, case, method, tmp_path):
    name, arch = FAMILY_CASES[case]
    data = family_data[name]
    candidate = Candidate(
        arch, pruning_ratio=0.25, method=method, batch_size=4,
        train=TrainConfig(epochs=1), finetune_epochs=1,
    )  # fmt: skip
    outcome = run_trial(candidate, CPU, data, tmp_path, cache=cache)
    assert outcome.latency["method"] == method and outcome.latency["batch_size"] == 4
    assert outcome.latency["source"] == "onnxruntime" and outcome.latency["runs"] > 0
    assert 0.0 <= outcome.metrics["accuracy"] <= 1.0
    assert outcome.metrics["params"] < outcome.metrics["params_unpruned"]
    assert outcome.history["onnx_max_abs_diff"] < 1e-4
    if method != CPU.methods[0]:  # the first method's trial built the model for the others
        assert outcome.reused["export"]
