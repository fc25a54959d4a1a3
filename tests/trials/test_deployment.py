"""A trial's deployment: resolved once, recorded, and read back by what measures it again."""

from __future__ import annotations

import pytest

from automl.candidate import ArchConfig, Candidate, TrainConfig
from automl.errors import SpecError
from automl.targets import load_target
from automl.trials.deployment import Deployment
from automl.trials.trial import run_trial


def _candidate(**knobs) -> Candidate:
    return Candidate(
        ArchConfig("mlp", 16, 1), batch_size=8, train=TrainConfig(epochs=1), finetune_epochs=0,
        **knobs,
    )  # fmt: skip


def test_a_trial_on_openvino_is_measured_and_evaluated_there_and_records_it(digits, tmp_path):
    outcome = run_trial(_candidate(method="int8-static", runtime="openvino"),
                        load_target("cpu"), digits, tmp_path)  # fmt: skip

    deployed = outcome.history["deployment"]
    assert deployed == {
        "target": "cpu", "runtime": "openvino", "method": "int8-static", "batch_size": 8,
        "threads": 1, "optimization": "all",
    }  # fmt: skip
    assert outcome.env["backend"] == "openvino" and outcome.env["openvino"]
    assert outcome.latency["source"] == "openvino"
    assert outcome.env["openvino_config"]["batch"] == "8"
    assert outcome.env["openvino_config"]["ENABLE_CPU_PINNING"] == "False"
    assert any(key.endswith(":u8") for key in outcome.env["placement"])  # ran in int8
    assert outcome.metrics["accuracy"] > 0.5


def test_the_recorded_deployment_is_what_a_re_measure_reads_back(digits, tmp_path):
    cpu = load_target("cpu")
    resolved = Deployment.resolve(cpu, _candidate(method="int8-static", runtime="openvino"))
    attrs = {"history": {"deployment": resolved.as_dict()}, "candidate": {"batch_size": 99}}

    again = Deployment.of_record(cpu, attrs)
    assert again == resolved and again.target.backend_for("int8-static").name == "openvino"
    # A trial recorded before deployments were: its candidate and its latency record.
    old = {"candidate": {"batch_size": 4}, "latency": {"method": "int8-dynamic"}}
    assert Deployment.of_record(cpu, old).runtime == "ort-cpu"
    with pytest.raises(SpecError, match="does not run method 'int8-dynamic'"):
        Deployment.resolve(cpu, _candidate(method="int8-dynamic", runtime="openvino"))


def test_a_per_layer_method_on_a_runtime_without_layer_times_fails_with_why(digits, tmp_path):
    from automl.errors import TrialFailed

    candidate = _candidate(method="int8-mixed", keep_fp32=1, runtime="openvino")
    with pytest.raises(TrialFailed, match="runtime 'openvino' times no single layer"):
        run_trial(candidate, load_target("cpu"), digits, tmp_path)
