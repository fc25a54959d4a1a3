from __future__ import annotations

import os

import onnxruntime as ort
import pytest

from automl.candidate import ArchConfig, Candidate, TrainConfig
from automl.catalog import get_method
from automl.errors import TargetUnavailable
from automl.models import build_model
from automl.pipeline.evaluate import evaluate
from automl.pipeline.export import export_onnx
from automl.pipeline.latency import LatencyBudget
from automl.pipeline.profile import SourceGraph
from automl.pipeline.quantize import quantize_method
from automl.records import BUILT
from automl.search.objectives import Constraint
from automl.search.spec import parse_spec
from automl.targets import load_target
from automl.trials import trial as trial_module
from automl.trials.stage_cache import StageCache
from automl.trials.trial import engine_folder, latency_budgets, run_trial, what_was_built


def _constraints(*texts: str) -> list[Constraint]:
    return [Constraint.model_validate(text) for text in texts]


def test_latency_constraints_become_per_batch_budgets() -> None:
    constraints = _constraints(
        "latency_p99_ms <= 5",
        "latency_p50_ms <= 2",
        "latency_p95_ms <= 3",
        "latency_per_sample_ms <= 0.5",
        "throughput_sps >= 1000",
        "accuracy >= 0.9",
        "size_mb <= 1",
    )

    budgets = latency_budgets(constraints, batch_size=8)

    assert budgets == [
        LatencyBudget(5.0, 0.99),
        LatencyBudget(2.0, 0.5),
        LatencyBudget(3.0, 0.95),
        LatencyBudget(4.0, 0.5),
        LatencyBudget(8.0, 0.5),
    ]


def test_a_trial_over_its_latency_budget_is_timed_briefly_and_recorded_infeasible(
    digits, tmp_path
) -> None:
    candidate = Candidate(
        ArchConfig("mlp", 8, 1), batch_size=8, train=TrainConfig(epochs=1), finetune_epochs=0
    )
    budget = "latency_p99_ms <= 0.000001"  # no model runs in a nanosecond

    outcome = run_trial(
        candidate, load_target("cpu"), digits, tmp_path, constraints=_constraints(budget)
    )

    assert outcome.latency["over_budget"] and not outcome.latency["converged"]
    assert outcome.latency["runs"] == 3
    assert outcome.metrics["latency_p99_ms"] > 0.000001
    assert 0 < outcome.metrics["accuracy"] <= 1


def test_the_search_sees_validation_accuracy_and_the_test_split_is_only_recorded(
    digits, tmp_path
) -> None:
    candidate = Candidate(
        ArchConfig("mlp", 8, 1), batch_size=16, train=TrainConfig(epochs=1), finetune_epochs=0
    )

    outcome = run_trial(candidate, load_target("cpu"), digits, tmp_path)

    def accuracy(x, y) -> float:
        return evaluate(outcome.artifact, x, y, num_classes=10, batch_size=16).accuracy

    assert outcome.metrics["accuracy"] == accuracy(digits.x_val, digits.y_val)
    assert outcome.metrics["test_accuracy"] == accuracy(digits.x_test, digits.y_test)
    assert parse_spec({}).objectives[0].value(outcome.metrics) == outcome.metrics["accuracy"]
    assert sum(map(sum, outcome.history["test_confusion"])) == len(digits.y_test)


def test_a_trial_quantizes_with_the_method_its_candidate_names(digits, tmp_path) -> None:
    candidate = Candidate(
        ArchConfig("mlp", 8, 1), batch_size=8, train=TrainConfig(epochs=1), finetune_epochs=0,
        method="int8-dynamic",
    )  # fmt: skip
    outcome = run_trial(candidate, load_target("cpu"), digits, tmp_path)
    assert candidate.bits == 8 and outcome.latency["method"] == "int8-dynamic"
    assert outcome.history[BUILT] == {"method": "int8-dynamic", "widths": [8]}


def test_an_int8_mixed_graph_that_kept_every_layer_is_recorded_as_fp32(digits, tmp_path) -> None:
    model = build_model(ArchConfig("cnn", 16, 2), digits.input_shape, digits.num_classes, seed=0)
    fp32 = export_onnx(model.eval(), digits.x_test[:8], tmp_path / "cnn.onnx").path
    layers = list(SourceGraph(fp32).layers)  # two convs and the classifier
    mixed = get_method("int8-mixed")
    for kept, deployed in ((layers, "fp32"), (layers[:1], "int8-mixed")):
        graph = quantize_method(fp32, tmp_path / "q.onnx", mixed.name, calibration=digits.x_calib,
                                keep=kept)  # fmt: skip
        assert what_was_built(mixed, graph, fp32) == {"method": deployed, "widths": [16, 16]}


@pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(), reason="onnxruntime-gpu is here"
)
def test_a_gpu_trial_without_the_cuda_provider_is_refused_before_training(
    digits, tmp_path, monkeypatch
) -> None:
    # An nvidia-smi that reports an A100: the hardware this CPU machine lacks. ONNX Runtime is
    # the real CPU build, which has no CUDAExecutionProvider.
    exe = tmp_path / "bin" / "nvidia-smi"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\necho 'NVIDIA A100-SXM4-80GB, Disabled'\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    candidate = Candidate(ArchConfig("mlp", 8, 1), batch_size=1, train=TrainConfig(epochs=1))
    workdir = tmp_path / "trial"

    with pytest.raises(TargetUnavailable, match=r"CUDAExecutionProvider.*make install-gpu"):
        run_trial(candidate, load_target("a100"), digits, workdir)
    assert not workdir.exists()  # nothing trained, exported or timed


def test_tensorrt_engines_are_kept_per_graph_batch_and_tensorrt_version(
    tmp_path, monkeypatch
) -> None:
    graph = tmp_path / "model.onnx"
    graph.write_bytes(b"graph")
    cache = StageCache(tmp_path / "cache", max_bytes=10**6)
    a100 = load_target("a100")

    def folder(batch: int, method: str = "int8-trt", target=a100):
        with engine_folder(graph, batch, target, method, cache) as engines:
            if engines is not None:
                (engines / "model.engine").write_bytes(b"engine")
        return sorted(p.name for p in cache.root.iterdir())

    assert folder(8, target=load_target("cpu"), method="int8-static") == []  # no TensorRT
    assert folder(8, method="fp32") == []  # the CUDA provider keeps no engines
    assert len(folder(8)) == 1 and folder(8) == folder(8)  # published once, then read
    assert len(folder(16)) == 2
    # Another TensorRT loaded (a GPU-only fact: the versions that its library reports).
    versions = {"cuda": "13.0", "cudnn": "9.18.1", "tensorrt": "99.0.0"}
    monkeypatch.setattr(trial_module, "gpu_runtime_versions", lambda: versions)
    assert len(folder(8)) == 3  # another TensorRT builds its own engines
