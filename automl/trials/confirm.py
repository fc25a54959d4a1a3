"""Latency constraints judged on evidence: a trial is infeasible on one only once more runs say so.

A trial's latency comes from a short measurement, whose tail a shared host's load can inflate:
a p99 of 50 runs rests on its slowest run or two. So before a latency constraint marks a trial
infeasible, its model is timed again until the 95% interval of the constrained statistic lies
on one side of the bound, or a cap (see :func:`automl.pipeline.latency_decision.sample_until_decided`).
The constraint is then judged on the new runs' estimate; both measurements are recorded.

Each run of the model is interleaved with a run of a reference, a one-node graph on the CPU
whose time is the host's own overhead: its tail during the re-measure (``host_tail``, its p99
over its p50) says how loaded the host was while the model was timed again.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from automl.catalog.runtimes._ort import make_session
from automl.pipeline.latency import ort_run_timer
from automl.pipeline.latency_decision import LATENCY_METRICS, decide_all, sample_until_decided
from automl.pipeline.timers import host_timer
from automl.targets.gpus import measurement_lock
from automl.targets.presence import probe_model
from automl.trials.trial import engine_folder

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from automl.candidate import Candidate
    from automl.inputs.data import Dataset
    from automl.search.objectives import Constraint
    from automl.targets import Target
    from automl.trials.stage_cache import StageCache

# Runs before the first look, and the cap on the re-measure of one trial.
_MIN_RUNS = 200
_MAX_SECONDS = 3.0


def confirm_latency(
    model_path: Path,
    target: Target,
    data: Dataset,
    candidate: Candidate,
    latency: dict,
    constraints: Sequence[Constraint],
    metrics: dict[str, float],
    cache: StageCache | None = None,
) -> dict | None:
    """Re-measure a trial whose first measurement breaks a latency constraint.

    A first measurement that stopped because its runs proved a budget exceeded
    (``over_budget``) is evidence already, and is not repeated. A re-measure that fails (a
    TensorRT engine that does not build again, a busy GPU) is recorded as ``error``, and the
    trial is judged on its first measurement.

    Args:
        model_path: The trial's ONNX artifact.
        target: Where it was measured, and is measured again.
        data: The dataset, whose test inputs are fed.
        candidate: The trial's candidate (its serving batch and graph optimisation).
        latency: The trial's first measurement (its ``method`` and ``over_budget``).
        constraints: The study's constraints.
        metrics: The trial's metrics from its first measurement.
        cache: The stage cache, whose TensorRT engine the trial built is timed again.

    Returns:
        None when no latency constraint is broken, or the runs proved it; else ``decisions``
        (one per broken constraint: verdict, the new estimate and its 95% interval, runs,
        reason), ``runs``,
        ``stop`` (``decided`` or ``cap``), ``judged``: the metric values the constraints are
        to be judged on (the new estimates), and ``reference``: the reference's p50, p99 and
        ``host_tail`` during the re-measure.
    """
    broken = [c for c in constraints if c.metric in LATENCY_METRICS and c.violation(metrics) > 0]
    if not broken or latency.get("over_budget"):
        return None
    try:
        deployed = target.on_runtime(candidate.runtime)  # on the runtime it was measured on
        return _remeasure(model_path, deployed, data, candidate, latency["method"], broken, cache)
    except Exception as e:  # ONNX Runtime's, TensorRT's: the first measurement stands
        return {"error": f"{type(e).__name__}: {e}"}


def _remeasure(
    model_path: Path,
    target: Target,
    data: Dataset,
    candidate: Candidate,
    method: str,
    broken: Sequence[Constraint],
    cache: StageCache | None,
) -> dict:
    batch = candidate.batch_size
    reference, reference_times = _reference(model_path.parent / "reference.onnx"), []

    def interleaved() -> float:
        reference_times.append(reference())
        return run_once()

    with (
        measurement_lock(target),
        engine_folder(model_path, batch, target, method, cache) as engines,
    ):
        run_once, _ = ort_run_timer(
            model_path, target, data.x_test, batch, method=method,
            optimization=candidate.graph_optimization, cache_dir=engines,
        )  # fmt: skip
        samples, stop = sample_until_decided(  # a decision only: the median may stay loose
            interleaved, batch, broken, min_runs=_MIN_RUNS, rel_ci=math.inf,
            max_seconds=_MAX_SECONDS,
        )  # fmt: skip
    decisions = decide_all(samples, batch, broken)
    p50, p99 = np.percentile(reference_times, [50, 99])
    return {
        "decisions": [d.as_dict() for d in decisions],
        "runs": len(samples),
        "stop": stop,
        "judged": {d.metric: d.value for d in decisions},
        "reference": {"p50_ms": float(p50), "p99_ms": float(p99), "host_tail": float(p99 / p50)},
    }


def _reference(path: Path) -> Callable[[], float]:
    """A timer of the reference: a one-node graph on the CPU, one thread."""
    path.write_bytes(probe_model())
    session = make_session(path, ["CPUExecutionProvider"], 1)
    return host_timer(session, np.ones((1, 8), np.float32))
