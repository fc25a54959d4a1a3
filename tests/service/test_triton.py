"""A trial as a Triton model: config.pbtxt pins the session as the trial was measured."""

from __future__ import annotations

import pytest

from automl.errors import SpecError
from automl.service.triton import model_name, triton_config

IO = {
    "input": {"name": "input", "dtype": "float32", "shape": ["batch", 1, 8, 8]},
    "output": {"name": "logits", "dtype": "float32", "shape": ["batch", 10]},
}
SERVED = {"settings": {"max_batch": 16, "max_queue_delay_ms": 0.5, "instances": 2}}


def _parameters(config: str) -> dict[str, str]:
    lines = [line for line in config.splitlines() if line.startswith("parameters {")]
    return {line.split('"')[1]: line.split('"')[3] for line in lines}


def test_a_trial_runs_its_measured_threads_in_sequence():
    env = {"intra_op_threads": 4, "graph_optimization": "all"}
    config = triton_config({**IO, "env": env, "candidate": {"batch_size": 8}}, "m", "cpu")
    assert _parameters(config) == {
        "intra_op_thread_count": "4",
        "inter_op_thread_count": "1",
        "execution_mode": "0",
    }
    assert "max_batch_size: 8\n" in config and "count: 1, kind: KIND_CPU" in config
    assert "optimization" not in config  # "all" is the backend's default


def test_a_served_trial_splits_its_threads_between_instances_as_measured():
    env = {"intra_op_threads": 4, "graph_optimization": "basic"}
    config = triton_config({**IO, "env": env, "serving": SERVED}, "m", "cuda")
    assert _parameters(config)["intra_op_thread_count"] == "2"  # 4 threads, 2 instances
    assert "count: 2, kind: KIND_GPU" in config and "max_queue_delay_microseconds: 500 }" in config
    assert "optimization { graph { level: -1 } }" in config  # the backend's name for basic
    one = triton_config({**IO, "env": {"intra_op_threads": 1}, "serving": SERVED}, "m", "cpu")
    assert _parameters(one)["intra_op_thread_count"] == "1"  # at least one each


def test_a_trial_without_a_thread_count_says_so():
    config = triton_config({**IO, "env": {}}, "m", "cpu")
    assert _parameters(config) == {} and "recorded no thread count" in config


def test_the_model_is_named_after_the_study_unless_a_name_is_given():
    assert model_name(None, "digits-serving-cpu") == "digits-serving-cpu"
    assert model_name("digits", "digits-serving-cpu") == "digits"
    with pytest.raises(SpecError, match=r"--model-name 'a/b': a Triton model name is letters"):
        model_name("a/b", "s")
