"""Latency stage: measure a model on its target's hardware, never estimate it.

Method: warm up, then time single runs until the 95% confidence interval of the median
is within ``rel_ci`` of the median, or a cap on runs or seconds is reached. The interval is
checked every ``_CHUNK_RUNS`` runs once ``min_runs`` are in, and before that after every run
once the runs have taken ``min_seconds`` (at least ``_FEWEST_RUNS`` of them): a slow model then
stops as soon as its runs agree, instead of taking ``min_runs`` of them. Warm-up stops after ``warmup_runs``
runs or ``_WARMUP_SECONDS``, whichever comes first, but never before two runs; on a GPU it goes
by time instead (see :mod:`automl.pipeline.gpu_warmup`). Inputs are real test samples at the
candidate's batch size.

ONNX Runtime runs the graph on the backend of its method (see :mod:`automl.catalog`)
with the target's pinned intra-op threads, and nowhere else: a CUDA target whose ONNX Runtime
lacks the backend's provider is refused (``make install-gpu``), never timed by another runtime.
A GPU backend's percentiles are device-resident runs, and ``end_to_end_p50_ms`` adds the
copies to the GPU and back (see :mod:`automl.pipeline.timers`). The CUDA provider runs with
TF32 off, so that fp32 is fp32, and the environment records it.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from automl.catalog import get_backend
from automl.errors import SpecError
from automl.metrics import REGISTRY
from automl.pipeline.gpu_warmup import gpu_state, warm_up_by_time
from automl.pipeline.latency_decision import quantile_interval
from automl.pipeline.timers import open_runner
from automl.targets.gpus import measurement_lock

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    import onnxruntime as ort

    from automl.targets import Target

_CHUNK_RUNS = 25
_FEWEST_RUNS = 10  # below it, the median's interval spans every run
_WARMUP_SECONDS = 0.2
_FEWEST_OVER_BUDGET = 3  # timed runs a candidate over budget still gets, for its median
_OVER_BUDGET_ERROR = 0.025  # chance that a candidate stopped over budget was within it
_END_TO_END_RUNS = 25  # the second figure of a GPU backend: a median, not a search


@dataclass(frozen=True)
class LatencyStats:
    """Summary of timed runs; all times in milliseconds, per batch unless named per-sample.

    ``metrics`` holds every registered latency metric that is a quantile of the per-batch times
    (see :mod:`automl.metrics`), by name and in its units: what a trial records.
    """

    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    ci_low_ms: float
    ci_high_ms: float
    ci_rel: float
    cv: float
    per_sample_ms: float
    throughput_sps: float
    runs: int
    batch_size: int
    metrics: dict[str, float] = field(hash=False)


@dataclass(frozen=True)
class Latency(LatencyStats):
    """A latency measurement and how it was taken.

    Attributes:
        converged: The CI target was reached before a cap stopped the runs.
        over_budget: The runs stopped early, all over a latency budget (see
            :class:`LatencyBudget`): the candidate is infeasible, and its times are few.
        source: The package of the runtime that timed it: ``"onnxruntime"``, ``"openvino"``.
        provider: The execution provider that really ran the model.
        backend: The runtime (see :mod:`automl.catalog.runtimes`).
        timing: ``"host"`` (numpy in and out), ``"device-resident"`` or ``"device-resident,
            cuda-graph"`` (see :mod:`automl.pipeline.timers`): what the percentiles time.
        end_to_end_p50_ms: Median of runs with the copies to the device and back: the p50
            itself where the timing is ``"host"``.
        env: Environment fingerprint (see :func:`automl.pipeline.timers.env_fingerprint`).
        device: On a GPU, its ``warmup`` and its ``gpu_state`` (clocks, power state,
            temperature) ``before`` and ``after`` the timed runs; empty on the CPU.
    """

    converged: bool
    over_budget: bool
    source: str
    provider: str
    backend: str
    timing: str
    end_to_end_p50_ms: float
    env: dict[str, Any] = field(hash=False)
    device: dict[str, Any] = field(default_factory=dict, hash=False)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able values, e.g. for Optuna user attrs."""
        return asdict(self)


@dataclass(frozen=True)
class LatencyBudget:
    """A latency constraint: the ``quantile`` of per-batch times must not exceed ``ms``.

    If it holds, a run exceeds ``ms`` with a chance of at most ``1 - quantile``, so ``k`` runs in
    a row do with at most ``(1 - quantile) ** k``. Once that is below 2.5%, those runs prove
    the candidate over budget: one run for a p99 budget, two for p90, six for the median. At
    least three are taken all the same, for the median they report.
    """

    ms: float
    quantile: float

    def __post_init__(self) -> None:
        if not (self.ms > 0 and 0 < self.quantile < 1):
            raise SpecError(
                f"a latency budget needs ms > 0 and 0 < quantile < 1, got {self.ms}, "
                f"{self.quantile}"
            )

    @property
    def proof_runs(self) -> int:
        """First timed runs that, all over ``ms``, prove the budget exceeded (at least three)."""
        proof = math.ceil(math.log(_OVER_BUDGET_ERROR) / math.log(1 - self.quantile))
        return max(proof, _FEWEST_OVER_BUDGET)


def latency_stats(samples_ms: Sequence[float], batch_size: int) -> LatencyStats:
    """Summarise timed runs.

    Percentiles use numpy's linear interpolation. The 95% CI of the median is
    distribution-free: order statistics at ranks ``n/2 - 1.96*sqrt(n)/2`` (floored) and
    ``n/2 + 1 + 1.96*sqrt(n)/2`` (ceiled), 1-based and clipped to ``[1, n]``.

    Args:
        samples_ms: Per-batch run times in milliseconds (at least one).
        batch_size: Samples per run.

    Returns:
        The statistics; ``ci_rel`` is the CI half-width divided by the median, ``cv`` the
        sample standard deviation divided by the mean, and ``metrics`` each registered
        latency quantile's metric.

    Raises:
        ValueError: ``samples_ms`` is empty.
    """
    x = np.sort(np.asarray(samples_ms, dtype=np.float64))
    n = x.size
    if n == 0:
        raise ValueError("latency_stats needs at least one sample")
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    timed = [m for m in REGISTRY.values() if m.quantile is not None]
    at = np.percentile(x, [100 * m.quantile for m in timed])
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if n > 1 else 0.0
    median = quantile_interval(x, 0.5)  # a bound too few runs give is the extreme run
    ci_low = float(x[0]) if median.low_ms is None else median.low_ms
    ci_high = float(x[-1]) if median.high_ms is None else median.high_ms
    return LatencyStats(
        p50_ms=float(p50),
        p90_ms=float(p90),
        p99_ms=float(p99),
        mean_ms=mean,
        ci_low_ms=ci_low,
        ci_high_ms=ci_high,
        ci_rel=(ci_high - ci_low) / 2 / float(p50) if p50 > 0 else math.inf,
        cv=std / mean if mean > 0 else 0.0,
        per_sample_ms=float(p50) / batch_size,
        throughput_sps=batch_size * 1000.0 / float(p50) if p50 > 0 else math.inf,
        runs=n,
        batch_size=batch_size,
        metrics={
            m.name: m.in_units(float(ms), batch_size) for m, ms in zip(timed, at, strict=True)
        },
    )


def measure_latency(
    model: Path | str | ort.InferenceSession,
    target: Target,
    inputs: np.ndarray,
    batch_size: int,
    *,
    method: str,
    cache_dir: Path | None = None,
    warmup_runs: int = 10,
    min_runs: int = 50,
    max_runs: int = 5000,
    max_seconds: float = 2.0,
    min_seconds: float = 0.25,
    rel_ci: float = 0.02,
    budgets: Sequence[LatencyBudget] = (),
    optimization: str = "all",
) -> Latency:
    """Measure the latency of one model at one batch size on the target's hardware.

    Args:
        model: The ONNX file, or a session of it opened by
            :func:`automl.pipeline.timers.backend_session` (one that has just run at
            ``batch_size`` needs fewer ``warmup_runs``). A GPU backend given
            a file times it as a CUDA graph where ONNX Runtime can capture one.
        target: Where to measure; its hardware must be on this machine.
        inputs: Real test samples ``(N, *input_shape)``, floats or token ids as the model
            takes them; rows are repeated when ``N < batch_size``.
        batch_size: Samples per run.
        method: The graph's quantization method; it picks the target's backend.
        cache_dir: Where TensorRT keeps its engines (see
            :meth:`automl.catalog.Backend.provider_options`).
        warmup_runs: Untimed runs first.
        min_runs: Timed runs before convergence is checked.
        max_runs: Cap on timed runs.
        max_seconds: Cap on the time spent in timed runs.
        min_seconds: Time in timed runs after which the interval is checked after every run
            until ``min_runs`` are in.
        rel_ci: Stop once the median's 95% CI half-width is within this fraction of it.
        budgets: The study's latency constraints at this batch size; the runs stop as soon as
            they prove one exceeded (``over_budget``).
        optimization: ONNX Runtime's graph optimisation level for a file (a session passed
            in has its own).

    Returns:
        The measurement.

    Raises:
        TargetUnavailable: The hardware is absent, or ONNX Runtime here cannot use it.
        TrialFailed: Compute nodes run on a provider other than the backend's (see
            :func:`automl.catalog.runtimes._placement.check_placement`), or ONNX Runtime refused the
            graph on it (see :func:`automl.pipeline.timers.backend_session`).
        SpecError: ``batch_size``, ``inputs``, ``method`` or the run limits are unusable.
    """
    if not 1 <= min_runs <= max_runs:
        raise SpecError(f"need 1 <= min_runs <= max_runs; got {min_runs}, {max_runs}")
    timer = open_runner(model, target, inputs, batch_size, method, cache_dir, optimization)
    device: dict[str, Any] = {}
    on_device = timer.end_to_end is not None
    if on_device:  # by time, as clocks ramp up (see automl.pipeline.gpu_warmup)
        device["warmup"] = warm_up_by_time(timer.run_once)
        device["gpu_state"] = {"before": gpu_state()}  # as the timed runs start
    else:
        _warm_up(timer.run_once, warmup_runs)
    limits = _Limits(min_runs, max_runs, min_seconds, max_seconds, rel_ci, tuple(budgets))
    samples, stop = _timed_runs(timer.run_once, batch_size, limits)
    stats = latency_stats(samples, batch_size)
    end_to_end = stats.p50_ms
    if on_device:
        device["gpu_state"]["after"] = gpu_state()
        end_to_end = float(np.median([timer.end_to_end() for _ in range(_END_TO_END_RUNS)]))
    return Latency(
        **asdict(stats),
        converged=stop == "converged",
        over_budget=stop == "over_budget",
        source=get_backend(timer.env["backend"]).package,
        provider=timer.env["provider"],
        backend=timer.env["backend"],
        timing=timer.env["timing"],
        end_to_end_p50_ms=end_to_end,
        env=timer.env,
        device=device,
    )


def ort_run_timer(
    model: Path | str,
    target: Target,
    inputs: np.ndarray,
    batch_size: int,
    *,
    method: str,
    warmup_runs: int = 10,
    optimization: str = "all",
    cache_dir: Path | None = None,
) -> tuple[Callable[[], float], dict[str, Any]]:
    """A warmed-up ONNX Runtime session on the target, as a function that times one run.

    For callers with their own stopping rule (re-measuring to decide a budget); the latency
    stage itself is :func:`measure_latency`, and the timing is the same.

    Args:
        model: The ONNX file.
        target: Where to measure; its hardware must be on this machine.
        inputs: Real test samples, as for :func:`measure_latency`.
        batch_size: Samples per run.
        method: The graph's quantization method; it picks the target's backend.
        warmup_runs: Untimed runs first.
        optimization: ONNX Runtime's graph optimisation level.
        cache_dir: Where TensorRT keeps its engines: the trial's, so that the engine timed is
            the one the trial built.

    Returns:
        ``run_once`` (milliseconds per batch) and the environment fingerprint.

    Raises:
        TargetUnavailable: The hardware is absent, or ONNX Runtime here cannot use it.
        TrialFailed: Compute nodes run on a provider other than the backend's, or ONNX
            Runtime refused the graph on it.
        SpecError: ``batch_size``, ``inputs`` or ``method`` are unusable.
    """
    timer = open_runner(model, target, inputs, batch_size, method, cache_dir, optimization)
    if timer.end_to_end is not None:  # a GPU: by time, as clocks ramp up
        warm_up_by_time(timer.run_once)
    else:
        _warm_up(timer.run_once, warmup_runs)
    return timer.run_once, timer.env


def interleaved_per_sample(
    timers: Sequence[tuple[Callable[[], float], int]],
    *,
    rounds: int = 100,
    max_seconds: float = 1.0,
) -> list[float]:
    """Per-sample median milliseconds of warmed-up timers (see :func:`ort_run_timer`), each
    with its batch size, run in turn, round after round.

    Two figures measured one after the other move apart when the host's load changes between
    them; runs in turn share it, so their ratio holds. Odd rounds run the timers in reverse
    order (ABBA), so that neither always runs first. At least ``_FEWEST_RUNS`` rounds run, then
    up to ``rounds`` within ``max_seconds``.
    """
    samples: list[list[float]] = [[] for _ in timers]
    order = list(range(len(timers)))
    start = time.perf_counter()
    for done in range(rounds):
        if done >= _FEWEST_RUNS and time.perf_counter() - start > max_seconds:
            break
        for i in order if done % 2 == 0 else order[::-1]:
            samples[i].append(timers[i][0]())
    return [float(np.median(s)) / batch for s, (_, batch) in zip(samples, timers, strict=True)]


def per_sample_in_turn(
    target: Target, inputs: np.ndarray, graphs: Sequence[tuple[Path, int, str, str]]
) -> list[float] | None:
    """Per-sample median milliseconds of ONNX graphs run in turn on the target (see
    :func:`interleaved_per_sample`), each given as (path, batch size, method, graph
    optimisation level); None where a graph's backend times on a device, which this does not
    interleave."""
    if any(target.backend_for(method).on_device for _, _, method, _ in graphs):
        return None
    with measurement_lock(target):
        timers = [
            (
                ort_run_timer(path, target, inputs, batch, method=method, optimization=level)[0],
                batch,
            )
            for path, batch, method, level in graphs
        ]
        return interleaved_per_sample(timers)


@dataclass(frozen=True)
class _Limits:
    min_runs: int
    max_runs: int
    min_seconds: float
    max_seconds: float
    rel_ci: float
    budgets: tuple[LatencyBudget, ...] = ()


def _warm_up(run_once: Callable[[], float], runs: int) -> None:
    spent = 0.0
    for done in range(runs):
        if done >= 2 and spent >= _WARMUP_SECONDS * 1000:
            return
        spent += run_once()


def _timed_runs(
    run_once: Callable[[], float], batch_size: int, limits: _Limits
) -> tuple[list[float], str]:
    """Timed runs, and why they stopped: ``converged``, ``over_budget`` or ``cap``."""
    samples: list[float] = []
    unproven = list(limits.budgets)  # the budgets that every run so far exceeded
    start = time.perf_counter()
    while len(samples) < limits.max_runs:
        samples.append(run_once())
        unproven = [budget for budget in unproven if samples[-1] > budget.ms]
        n, elapsed = len(samples), time.perf_counter() - start
        due = n >= limits.min_runs and (n - limits.min_runs) % _CHUNK_RUNS == 0
        due = due or (_FEWEST_RUNS <= n < limits.min_runs and elapsed >= limits.min_seconds)
        if due and latency_stats(samples, batch_size).ci_rel <= limits.rel_ci:
            return samples, "converged"
        if any(n >= budget.proof_runs for budget in unproven):
            return samples, "over_budget"
        if elapsed > limits.max_seconds:
            break
    return samples, "cap"
