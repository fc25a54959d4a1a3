"""Latency stage: measure a model on its target's hardware, never estimate it.

Method: warm up, then time single runs until the 95% confidence interval of the median
is within ``rel_ci`` of the median, or a cap on runs or seconds is reached. The interval is
checked every ``_CHUNK_RUNS`` runs once ``min_runs`` are in, and before that after every run
once the runs have taken ``min_seconds`` (at least ``_FEWEST_RUNS`` of them): a slow model then
stops as soon as its runs agree, instead of taking ``min_runs`` of them. Warm-up stops after ``warmup_runs``
runs or ``_WARMUP_SECONDS``, whichever comes first, but never before two runs. Inputs are real
test samples at the candidate's batch size. ONNX Runtime runs on the target's first execution
provider with its pinned intra-op threads; a CUDA target whose ONNX Runtime lacks the CUDA
provider may be timed with torch on CUDA instead (``source="torch-cuda"``), never on the CPU.
"""

from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort

from automl.errors import SpecError, TargetUnavailable
from automl.pipeline._ort import feed, input_dtype, input_name, model_dtype, open_session
from automl.pipeline.latency_decision import quantile_interval
from automl.pipeline.placement import check_placement, node_placements
from automl.pipeline.torch_cuda_latency import cuda_available, cuda_runner
from automl.targets import detect_gpu_names, matching_gpus, require_present

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    import torch

    from automl.targets import Target

_CHUNK_RUNS = 25
_FEWEST_RUNS = 10  # below it, the median's interval spans every run
_WARMUP_SECONDS = 0.2
_FEWEST_OVER_BUDGET = 3  # timed runs a candidate over budget still gets, for its median
_OVER_BUDGET_ERROR = 0.025  # chance that a candidate stopped over budget was within it


@dataclass(frozen=True)
class LatencyStats:
    """Summary of timed runs; all times in milliseconds, per batch unless named per-sample."""

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


@dataclass(frozen=True)
class Latency(LatencyStats):
    """A latency measurement and how it was taken.

    Attributes:
        converged: The CI target was reached before a cap stopped the runs.
        over_budget: The runs stopped early, all over a latency budget (see
            :class:`LatencyBudget`): the candidate is infeasible, and its times are few.
        source: ``"onnxruntime"`` or ``"torch-cuda"``.
        provider: The execution provider that really ran the model.
        env: Environment fingerprint (see :func:`env_fingerprint`).
    """

    converged: bool
    over_budget: bool
    source: str
    provider: str
    env: dict[str, Any] = field(hash=False)

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
        The statistics; ``ci_rel`` is the CI half-width divided by the median and ``cv``
        the sample standard deviation divided by the mean.

    Raises:
        ValueError: ``samples_ms`` is empty.
    """
    x = np.sort(np.asarray(samples_ms, dtype=np.float64))
    n = x.size
    if n == 0:
        raise ValueError("latency_stats needs at least one sample")
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
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
    )


def env_fingerprint(
    provider: str, threads: int, target: Target, placement: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """Describe where a measurement ran.

    Args:
        provider: The execution provider (or ``"torch.cuda"``) that ran the model.
        threads: Intra-op threads used.
        target: The target measured.
        placement: Nodes per execution provider of the timed session, when ONNX Runtime ran it
            (see :func:`automl.pipeline.placement.check_placement`).

    Returns:
        ORT version, provider, threads, CPU model, logical cores, GPU name (cuda targets),
        Python version, platform, target name and, when given, ``placement``.
    """
    env: dict[str, Any] = {
        "target": target.name,
        "onnxruntime": ort.__version__,
        "provider": provider,
        "intra_op_threads": threads,
        "cpu_model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    if target.kind == "cuda":
        env["gpu"] = next(iter(matching_gpus(target, detect_gpu_names())), None)
    if placement is not None:
        env["placement"] = dict(placement)
    return env


def measure_latency(
    model: Path | str | ort.InferenceSession,
    target: Target,
    inputs: np.ndarray,
    batch_size: int,
    *,
    warmup_runs: int = 10,
    min_runs: int = 50,
    max_runs: int = 5000,
    max_seconds: float = 2.0,
    min_seconds: float = 0.25,
    rel_ci: float = 0.02,
    torch_model: torch.nn.Module | None = None,
    bits: int = 32,
    budgets: Sequence[LatencyBudget] = (),
) -> Latency:
    """Measure the latency of one model at one batch size on the target's hardware.

    Args:
        model: The ONNX file, or a session of it on ``target``'s providers and threads (one
            that has just run at ``batch_size`` needs fewer ``warmup_runs``).
        target: Where to measure; its hardware must be on this machine.
        inputs: Real test samples ``(N, *input_shape)``, floats or token ids as the model
            takes them; rows are repeated when ``N < batch_size``.
        batch_size: Samples per run.
        warmup_runs: Untimed runs first.
        min_runs: Timed runs before convergence is checked.
        max_runs: Cap on timed runs.
        max_seconds: Cap on the time spent in timed runs.
        min_seconds: Time in timed runs after which the interval is checked after every run
            until ``min_runs`` are in.
        rel_ci: Stop once the median's 95% CI half-width is within this fraction of it.
        torch_model: The same model in torch, timed on CUDA only when the target is a
            CUDA target and ONNX Runtime has no CUDA provider here.
        bits: The candidate's bit-width, for the torch path: 16 runs in half precision, 32 in
            float32, and other widths cannot be timed there.
        budgets: The study's latency constraints at this batch size; the runs stop as soon as
            they prove one exceeded (``over_budget``).

    Returns:
        The measurement.

    Raises:
        TargetUnavailable: The hardware is absent, or no runtime here can use it.
        TrialFailed: Compute nodes run on a provider other than the target's (see
            :func:`automl.pipeline.placement.check_placement`).
        UnsupportedQuantization: Only the torch path is available, and it cannot run ``bits``.
        SpecError: ``batch_size``, ``inputs`` or the run limits are unusable.
    """
    require_present(target)
    if batch_size < 1 or len(inputs) == 0 or not 1 <= min_runs <= max_runs:
        raise SpecError(
            f"need batch_size >= 1, some inputs and 1 <= min_runs <= max_runs; got "
            f"batch_size={batch_size}, {len(inputs)} inputs, min_runs={min_runs}, "
            f"max_runs={max_runs}"
        )
    session = open_session(model, target.execution_providers, target.intra_op_threads)
    provider = session.get_providers()[0]
    wanted = target.execution_providers[0]
    if provider == wanted:
        placement = check_placement(node_placements(session), wanted)
        run_once = _ort_runner(session, _batch(inputs, batch_size, input_dtype(session)))
        source = "onnxruntime"
        env = env_fingerprint(provider, target.intra_op_threads, target, placement)
    elif target.kind == "cuda" and torch_model is not None and cuda_available():
        run_once, threads, torch_env = cuda_runner(
            torch_model, _batch(inputs, batch_size, model_dtype(inputs)), bits
        )
        provider, source = "torch.cuda", "torch-cuda"
        env = env_fingerprint(provider, threads, target) | torch_env
    else:
        raise TargetUnavailable(
            f"target {target.name!r} needs ONNX Runtime's {wanted}, but this ONNX Runtime "
            f"runs the model on {provider}. Install onnxruntime-gpu, or pass torch_model "
            "to time the torch model on CUDA. Latency is never estimated as a fallback."
        )
    _warm_up(run_once, warmup_runs)
    limits = _Limits(min_runs, max_runs, min_seconds, max_seconds, rel_ci, tuple(budgets))
    samples, stop = _timed_runs(run_once, batch_size, limits)
    return Latency(
        **asdict(latency_stats(samples, batch_size)),
        converged=stop == "converged",
        over_budget=stop == "over_budget",
        source=source,
        provider=provider,
        env=env,
    )


def ort_run_timer(
    model: Path | str, target: Target, inputs: np.ndarray, batch_size: int, *, warmup_runs: int = 10
) -> tuple[Callable[[], float], dict[str, Any]]:
    """A warmed-up ONNX Runtime session on the target, as a function that times one run.

    For callers with their own stopping rule (re-measuring to decide a budget); the latency
    stage itself is :func:`measure_latency`.

    Args:
        model: The ONNX file.
        target: Where to measure; its hardware must be on this machine.
        inputs: Real test samples, as for :func:`measure_latency`.
        batch_size: Samples per run.
        warmup_runs: Untimed runs first.

    Returns:
        ``run_once`` (milliseconds per batch) and the environment fingerprint.

    Raises:
        TargetUnavailable: The hardware is absent, or ONNX Runtime here cannot use it.
        TrialFailed: Compute nodes run on a provider other than the target's.
        SpecError: ``batch_size`` or ``inputs`` are unusable.
    """
    require_present(target)
    if batch_size < 1 or len(inputs) == 0:
        raise SpecError(f"need batch_size >= 1 and some inputs; got {batch_size}, {len(inputs)}")
    session = open_session(model, target.execution_providers, target.intra_op_threads)
    provider = session.get_providers()[0]
    if provider != target.execution_providers[0]:
        raise TargetUnavailable(
            f"target {target.name!r} needs ONNX Runtime's {target.execution_providers[0]}, "
            f"but this ONNX Runtime runs the model on {provider}"
        )
    placement = check_placement(node_placements(session), provider)
    run_once = _ort_runner(session, _batch(inputs, batch_size, input_dtype(session)))
    _warm_up(run_once, warmup_runs)
    return run_once, env_fingerprint(provider, target.intra_op_threads, target, placement)


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


def _ort_runner(session: ort.InferenceSession, batch: np.ndarray) -> Callable[[], float]:
    feed = {input_name(session): batch}

    def run_once() -> float:
        t0 = time.perf_counter_ns()
        session.run(None, feed)
        return (time.perf_counter_ns() - t0) / 1e6

    return run_once


def _batch(inputs: np.ndarray, batch_size: int, dtype: type) -> np.ndarray:
    return feed(inputs[np.arange(batch_size) % len(inputs)], dtype)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
