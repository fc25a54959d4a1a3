from __future__ import annotations

import json
import time
import warnings
from typing import TYPE_CHECKING

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch import nn

from automl.catalog import get_backend
from automl.catalog.runtimes._ort import make_session
from automl.errors import SpecError, TargetUnavailable
from automl.pipeline import latency as latency_module
from automl.pipeline import timers as timers_module
from automl.pipeline.latency import (
    LatencyBudget,
    interleaved_per_sample,
    latency_stats,
    measure_latency,
)
from automl.targets import load_target

pytest_plugins = ["family_data"]

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

FEATURES = 64


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 512), nn.ReLU(), nn.Linear(512, 10)).eval()
    path = tmp_path_factory.mktemp("latency") / "mlp.onnx"
    with warnings.catch_warnings():  # the TorchScript exporter is deprecated but plainer
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model,
            (torch.zeros(1, FEATURES),),
            str(path),
            dynamo=False,
            input_names=["input"],
            output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        )
    return path


@pytest.fixture(scope="module")
def samples() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((16, FEATURES), dtype=np.float32)


def test_stats_on_known_samples() -> None:
    values = np.arange(1, 101, dtype=np.float64)

    stats = latency_stats(values[::-1], batch_size=4)

    assert stats.p50_ms == pytest.approx(50.5)
    assert stats.p90_ms == pytest.approx(90.1)
    assert stats.p99_ms == pytest.approx(99.01)
    assert stats.mean_ms == pytest.approx(50.5)
    assert stats.cv == pytest.approx(values.std(ddof=1) / 50.5)
    # n=100: ranks floor(50 - 9.8) = 40 and ceil(51 + 9.8) = 61.
    assert (stats.ci_low_ms, stats.ci_high_ms) == (40.0, 61.0)
    assert stats.ci_rel == pytest.approx(10.5 / 50.5)
    assert stats.per_sample_ms == pytest.approx(50.5 / 4)
    assert stats.throughput_sps == pytest.approx(4000 / 50.5)
    assert stats.runs == 100
    # Every registered latency quantile, in its units: p95 is one registry entry.
    assert stats.metrics == pytest.approx({
        "latency_p50_ms": 50.5, "latency_p90_ms": 90.1, "latency_p95_ms": 95.05,
        "latency_p99_ms": 99.01, "latency_per_sample_ms": 50.5 / 4,
        "throughput_sps": 4000 / 50.5,
    })  # fmt: skip


def test_stats_on_constant_samples_and_tiny_n() -> None:
    constant = latency_stats([2.0] * 10, batch_size=1)
    single = latency_stats([3.0], batch_size=1)

    assert (constant.cv, constant.ci_rel) == (0.0, 0.0)
    assert (single.p50_ms, single.ci_low_ms, single.ci_high_ms, single.cv) == (3.0, 3.0, 3.0, 0)


def test_stats_need_samples() -> None:
    with pytest.raises(ValueError):
        latency_stats([], batch_size=1)


def test_measures_onnxruntime_on_cpu(onnx_model: Path, samples: np.ndarray) -> None:
    cpu = load_target("cpu")

    limits = {"min_runs": 100, "max_seconds": 1.0, "min_seconds": 1.0}
    one = measure_latency(onnx_model, cpu, samples, 1, **limits, method="fp32")
    many = measure_latency(onnx_model, cpu, samples, 64, **limits, method="fp32")

    for lat in (one, many):
        assert 0 < lat.p50_ms <= lat.p90_ms <= lat.p99_ms
        assert lat.runs >= 100
        assert lat.source == "onnxruntime"
        assert lat.provider == "CPUExecutionProvider"
        assert lat.env["intra_op_threads"] == 1
        assert lat.env["target"] == "cpu"
        json.dumps(lat.as_dict())
    assert (one.batch_size, many.batch_size) == (1, 64)
    assert many.p50_ms > one.p50_ms


def test_an_open_session_is_timed_with_the_warm_up_asked(
    onnx_model: Path, samples: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = make_session(onnx_model, ["CPUExecutionProvider"], 1)
    warm_ups = []
    monkeypatch.setattr(latency_module, "_warm_up", lambda run_once, runs: warm_ups.append(runs))

    lat = measure_latency(
        session, load_target("cpu"), samples, 8, warmup_runs=1, min_runs=10, method="fp32"
    )

    assert warm_ups == [1]
    assert lat.runs >= 10 and lat.provider == "CPUExecutionProvider"


def test_a_slow_model_stops_once_its_runs_agree_before_min_runs() -> None:
    def run_once() -> float:  # 30 ms a run: min_runs would take 1.5 s
        start = time.perf_counter_ns()
        time.sleep(0.03)
        return (time.perf_counter_ns() - start) / 1e6

    limits = latency_module._Limits(
        min_runs=50, max_runs=5000, min_seconds=0.25, max_seconds=10.0, rel_ci=0.1
    )
    samples, stop = latency_module._timed_runs(run_once, 1, limits)

    assert stop == "converged"
    assert latency_module._FEWEST_RUNS <= len(samples) < 50


@pytest.mark.parametrize(("quantile", "runs"), [(0.99, 3), (0.9, 3), (0.5, 6)])
def test_a_budget_is_proven_exceeded_by_runs_enough_for_its_quantile(quantile, runs) -> None:
    assert LatencyBudget(ms=1.0, quantile=quantile).proof_runs == runs


@pytest.mark.parametrize(("ms", "quantile"), [(0.0, 0.5), (1.0, 1.0), (1.0, 0.0)])
def test_a_budget_must_be_possible(ms, quantile) -> None:
    with pytest.raises(SpecError, match="latency budget"):
        LatencyBudget(ms=ms, quantile=quantile)


def _runs(times_ms: list[float]):
    queue = iter(times_ms)
    return lambda: next(queue)


def test_runs_all_over_a_budget_stop_as_over_budget() -> None:
    limits = latency_module._Limits(
        min_runs=50, max_runs=100, min_seconds=10.0, max_seconds=10.0, rel_ci=0.0,
        budgets=(LatencyBudget(ms=5.0, quantile=0.5), LatencyBudget(ms=8.0, quantile=0.99)),
    )  # fmt: skip

    samples, stop = latency_module._timed_runs(_runs([9.0, 9.5, 8.5] + [9.0] * 97), 1, limits)

    assert (stop, samples) == ("over_budget", [9.0, 9.5, 8.5])


def test_a_run_within_the_budget_keeps_the_candidate_timed() -> None:
    limits = latency_module._Limits(
        min_runs=50, max_runs=20, min_seconds=10.0, max_seconds=10.0, rel_ci=0.0,
        budgets=(LatencyBudget(ms=5.0, quantile=0.99),),
    )  # fmt: skip

    samples, stop = latency_module._timed_runs(_runs([4.0] + [9.0] * 19), 1, limits)

    assert (stop, len(samples)) == ("cap", 20)


def test_a_model_over_budget_is_measured_briefly(onnx_model: Path, samples: np.ndarray) -> None:
    budget = LatencyBudget(ms=1e-6, quantile=0.99)  # no model runs in a nanosecond

    lat = measure_latency(
        onnx_model, load_target("cpu"), samples, 8, budgets=[budget], method="fp32"
    )
    within = measure_latency(onnx_model, load_target("cpu"), samples, 8, min_runs=10, method="fp32")

    assert lat.over_budget and not lat.converged
    assert lat.runs == latency_module._FEWEST_OVER_BUDGET
    assert lat.p50_ms > budget.ms
    assert not within.over_budget and within.runs >= 10


@pytest.mark.parametrize(("run_ms", "runs"), [(1.0, 10), (150.0, 2)])
def test_warm_up_stops_after_its_runs_or_its_time(run_ms: float, runs: int) -> None:
    calls = []
    latency_module._warm_up(lambda: calls.append(run_ms) or run_ms, 10)

    assert len(calls) == runs


def test_stops_at_max_runs(onnx_model: Path, samples: np.ndarray) -> None:
    lat = measure_latency(
        onnx_model,
        load_target("cpu"),
        samples,
        1,
        warmup_runs=0,
        min_runs=5,
        max_runs=5,
        rel_ci=0.0,
        method="fp32",
    )

    assert lat.runs == 5
    assert not lat.converged


def test_rejects_bad_batch_size(onnx_model: Path, samples: np.ndarray) -> None:
    with pytest.raises(SpecError):
        measure_latency(onnx_model, load_target("cpu"), samples, 0, method="fp32")


def test_absent_gpu_raises_before_any_work(tmp_path: Path, samples: np.ndarray) -> None:
    with pytest.raises(TargetUnavailable, match="automl worker --target a100"):
        measure_latency(tmp_path / "missing.onnx", load_target("a100"), samples, 1, method="fp32")


def test_a_session_off_the_target_s_provider_is_refused_never_timed(
    onnx_model: Path, samples: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if an H100 and onnxruntime-gpu were here, and the session fell back to the CPU.
    monkeypatch.setattr(timers_module, "require_present", lambda target, methods=(): None)
    # fp32 runs on ort-cuda; with a GPU build and no driver here, CUDA does not start either.
    session = make_session(onnx_model, get_backend("ort-cuda").providers, 1)

    with pytest.raises(TargetUnavailable, match="runs the model on CPUExecutionProvider"):
        measure_latency(session, load_target("h100"), samples, 1, method="fp32")
    with pytest.raises(
        TargetUnavailable, match=r"CUDAExecutionProvider did not start: .*install-gpu"
    ):
        latency_module.ort_run_timer(session, load_target("h100"), samples, 1, method="fp32")


def test_a_cuda_environment_records_tf32_and_the_gpu_and_a_cpu_one_does_not() -> None:
    cuda = "CUDAExecutionProvider"
    env = timers_module.env_fingerprint(cuda, 1, load_target("a100"), {cuda: 3}, {"use_tf32": "0"})
    cpu = timers_module.env_fingerprint("CPUExecutionProvider", 1, load_target("cpu"), {})

    assert env["tf32"] is False and env["onnxruntime"] == ort.__version__
    gpu_keys = {"gpu", "gpu_index", "gpu_uuid", "driver", "cuda", "cudnn", "tensorrt"}
    assert gpu_keys <= env.keys()  # None without nvidia-smi and NVIDIA's wheels
    tf32 = {"use_tf32": "1", "device_id": "0"}
    assert timers_module.env_fingerprint(cuda, 1, load_target("a100"), None, tf32)["tf32"]
    assert cpu.keys() == env.keys() - gpu_keys - {"tf32"}
    assert cpu.keys() == {  # as before GPUs were described
        *("target", "onnxruntime", "provider", "intra_op_threads", "cpu_model"),
        *("logical_cores", "python", "platform", "placement"),
    }


def test_a_run_timer_times_one_run_of_the_warm_model_at_a_time(
    onnx_model: Path, samples: np.ndarray
) -> None:
    run_once, env = latency_module.ort_run_timer(
        onnx_model, load_target("cpu"), samples, 8, method="fp32"
    )

    times = [run_once() for _ in range(20)]

    assert all(t > 0 for t in times)
    assert env["provider"] == "CPUExecutionProvider" and env["target"] == "cpu"


def test_a_run_timer_needs_the_target_and_a_batch(tmp_path: Path, samples: np.ndarray) -> None:
    with pytest.raises(TargetUnavailable, match="automl worker --target a100"):
        latency_module.ort_run_timer(
            tmp_path / "missing.onnx", load_target("a100"), samples, 1, method="fp32"
        )
    with pytest.raises(SpecError, match="batch_size"):
        latency_module.ort_run_timer(
            tmp_path / "missing.onnx", load_target("cpu"), samples, 0, method="fp32"
        )


def test_a_token_model_is_timed_on_int64_ids_at_the_serving_batch(family_data, tmp_path):
    from automl.candidate import ArchConfig
    from automl.models import build_model
    from automl.pipeline.export import export_onnx

    data = family_data["tokens"]
    arch = ArchConfig("transformer", 16, 1, heads=2)
    model = build_model(arch, data.input_shape, data.num_classes, vocab_size=data.vocab_size)
    path = export_onnx(model.eval(), data.x_test[:8], tmp_path / "t.onnx").path
    result = measure_latency(
        path, load_target("cpu"), data.x_test, 8, min_runs=10, max_runs=20, method="fp32"
    )
    assert result.batch_size == 8 and result.runs >= 10 and result.p50_ms > 0
    with pytest.raises(SpecError, match="do not mix"):
        measure_latency(path, load_target("cpu"), data.x_test.astype(np.float32), 8, method="fp32")


def _loaded_timer(ms: float, calls: list[int]) -> Callable[[], float]:
    """A timer of ``ms`` per run on an idle host, whose load triples after 60 runs of either."""

    def run_once() -> float:
        calls.append(1)
        return ms * (3.0 if len(calls) > 60 else 1.0)

    return run_once


def test_figures_run_in_turn_keep_their_ratio_while_the_load_changes():
    calls: list[int] = []
    base, trial = _loaded_timer(4.0, calls), _loaded_timer(1.0, calls)  # batch 1 and batch 8
    before = np.median([base() for _ in range(60)])  # one after the other: 4 ms a run,
    after = np.median([trial() for _ in range(60)]) / 8  # then 3 ms a run of 8, per sample
    assert before / after == pytest.approx(32 / 3)  # the load took two thirds of the speedup
    calls.clear()
    base_ms, trial_ms = interleaved_per_sample([(base, 1), (trial, 8)], rounds=100)
    assert len(calls) == 200
    assert base_ms / trial_ms == pytest.approx(32.0)  # in turn: 4 ms against 1 ms for 8
