"""Deciding a latency budget from timed runs, with distribution-free confidence intervals.

The 95% interval of the ``q``-quantile is a pair of order statistics ``x_(l)`` and ``x_(u)``
(1-based, runs sorted) at the binomial ranks ``l = floor(n*q - z*sqrt(n*q*(1-q)))`` and
``u = ceil(n*q + 1 + z*sqrt(n*q*(1-q)))``, ``z = 1.96``: the number of runs below the true
quantile is Binomial(n, q), close to normal. Nothing is assumed of the run times' distribution,
only that runs are independent and alike (a burst of load breaks that; re-measuring repeats it).
A rank outside ``1..n`` has no order statistic, so that bound does not exist yet: a p99's upper
bound needs 563 runs, so fewer runs can never show a p99 budget met.

A budget is decided on the interval of its metric: ``meets`` when the whole interval is on the
allowed side of the bound, ``exceeds`` when it is wholly on the other side, else ``within-noise``
(it straddles the bound, or a bound it needs does not exist yet).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

from automl.errors import SpecError
from automl.metrics import REGISTRY, Names

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from automl.metrics import Metric

Verdict = Literal["meets", "exceeds", "within-noise"]
_Z95 = 1.96
_GROWTH = 1.5  # runs grow by half between looks: few looks keep the error near 2.5% a side
# The metrics a budget is decided on: those that are a quantile of per-batch times.
LATENCY_METRICS = Names(lambda m: m.quantile is not None)


class Budget(Protocol):
    """A bound on a latency metric, such as :class:`automl.search.objectives.Constraint`."""

    @property
    def metric(self) -> str: ...
    @property
    def op(self) -> str: ...
    @property
    def bound(self) -> float: ...


@dataclass(frozen=True)
class QuantileInterval:
    """A quantile of per-batch times (ms) and its 95% interval; a bound that does not exist
    yet (too few runs for its rank) is None."""

    quantile: float
    value_ms: float
    low_ms: float | None
    high_ms: float | None
    runs: int

    def as_dict(self) -> dict:
        """Plain JSON-able values."""
        return asdict(self)


@dataclass(frozen=True)
class BudgetDecision:
    """A budget decided on timed runs: the metric's value and 95% interval, in its units."""

    metric: str
    op: str
    bound: float
    verdict: Verdict
    value: float
    low: float | None
    high: float | None
    runs: int
    reason: str

    def as_dict(self) -> dict:
        """Plain JSON-able values."""
        return asdict(self)


def quantile_interval(samples_ms: Sequence[float], quantile: float) -> QuantileInterval:
    """The ``quantile`` of timed runs (numpy's linear interpolation) and its 95% interval.

    Args:
        samples_ms: Per-batch run times in milliseconds (at least one).
        quantile: Strictly between 0 and 1, e.g. 0.99 for the p99.

    Returns:
        The quantile and the order statistics at its binomial ranks (see the module docstring).

    Raises:
        ValueError: No samples, or a quantile outside (0, 1).
    """
    x = np.sort(np.asarray(samples_ms, dtype=np.float64))
    n = x.size
    if n == 0 or not 0 < quantile < 1:
        raise ValueError(f"need samples and 0 < quantile < 1; got {n} samples, {quantile}")
    low, high = _ranks(n, quantile)
    return QuantileInterval(
        quantile=quantile,
        value_ms=float(np.percentile(x, 100 * quantile)),
        low_ms=float(x[low - 1]) if low >= 1 else None,
        high_ms=float(x[high - 1]) if high <= n else None,
        runs=n,
    )


def _ranks(n: int, quantile: float) -> tuple[int, int]:
    half = _Z95 * math.sqrt(n * quantile * (1 - quantile))
    return math.floor(n * quantile - half), math.ceil(n * quantile + 1 + half)


@functools.cache
def fewest_runs(quantile: float) -> int:
    """Fewest runs for which both bounds of the ``quantile``'s 95% interval exist (p99: 563)."""
    n = 1
    while (ranks := _ranks(n, quantile))[0] < 1 or ranks[1] > n:
        n += 1
    return n


def decide_budget(
    samples_ms: Sequence[float], batch_size: int, metric: str, op: str, bound: float
) -> BudgetDecision:
    """Whether timed runs show ``metric op bound`` met, exceeded, or neither (within noise).

    Args:
        samples_ms: Per-batch run times in milliseconds.
        batch_size: Samples per run (for the per-sample and throughput metrics).
        metric: One of :data:`LATENCY_METRICS`, whose registered quantile of per-batch
            times it is, in its units (see :meth:`automl.metrics.Metric.in_units`).
        op: ``"<="`` or ``">="``.
        bound: The budget, in the metric's units.

    Returns:
        The decision, with the metric's value, its 95% interval and a reason to print.

    Raises:
        SpecError: Not a latency metric, or an unknown ``op``.
    """
    if metric not in LATENCY_METRICS or op not in ("<=", ">="):
        raise SpecError(f"cannot decide '{metric} {op} {bound}': need one of {LATENCY_METRICS}")
    entry = REGISTRY[metric]
    quantile = entry.quantile
    interval = quantile_interval(samples_ms, quantile)
    value, low, high = _in_units(interval, entry, batch_size)
    verdict = _verdict(op, bound, low, high)
    shown = f"{entry.quantile_label} {value:.4g} {entry.unit} [{_num(low)}, {_num(high)}]"
    if verdict != "within-noise":
        side = op if verdict == "meets" else {"<=": ">", ">=": "<"}[op]
        reason = f"{shown}, wholly {side} {bound:g}"
        if low is None or high is None:  # the end that decides it is known; "?" is the other
            reason += f" (? : too few runs, {interval.runs}, to bound its other end)"
    elif low is None or high is None:
        reason = (
            f"{shown}: too few runs, the 95% interval of a p{quantile * 100:g} needs at least "
            f"{fewest_runs(quantile)} runs, got {interval.runs}"
        )
    else:
        reason = f"{shown} straddles {bound:g}"
    return BudgetDecision(metric, op, bound, verdict, value, low, high, interval.runs, reason)


def decide_all(
    samples_ms: Sequence[float], batch_size: int, budgets: Sequence[Budget]
) -> list[BudgetDecision]:
    """:func:`decide_budget` for each of ``budgets``, in order."""
    return [decide_budget(samples_ms, batch_size, b.metric, b.op, b.bound) for b in budgets]


def _in_units(
    interval: QuantileInterval, metric: Metric, batch_size: int
) -> tuple[float, float | None, float | None]:
    """The interval in the metric's units: ms per batch or per sample, or samples per second."""
    ordered = (interval.value_ms, interval.low_ms, interval.high_ms)
    if metric.per == "rate":  # decreasing in the time: the bounds swap
        ordered = (interval.value_ms, interval.high_ms, interval.low_ms)
    value, low, high = (None if ms is None else metric.in_units(ms, batch_size) for ms in ordered)
    return float(value), low, high


def _verdict(op: str, bound: float, low: float | None, high: float | None) -> Verdict:
    allowed, other = (high, low) if op == "<=" else (low, high)
    within = (lambda v: v <= bound) if op == "<=" else (lambda v: v >= bound)
    if allowed is not None and within(allowed):
        return "meets"
    if other is not None and not within(other):
        return "exceeds"
    return "within-noise"


def _num(value: float | None) -> str:
    return "?" if value is None else f"{value:.4g}"


def sample_until_decided(
    run_once: Callable[[], float],
    batch_size: int,
    budgets: Sequence[Budget],
    *,
    min_runs: int = 200,
    rel_ci: float = 0.01,
    max_seconds: float = 5.0,
    max_runs: int = 1_000_000,
) -> tuple[list[float], str]:
    """Time runs until every budget is decided and the median is tight, or a cap is hit.

    The runs are looked at after ``min_runs``, then each time they have grown by half. Each
    look that may stop adds to the chance of stopping on an interval that misses; with looks
    this far apart, few happen before a cap.

    Args:
        run_once: Times one run, in milliseconds.
        batch_size: Samples per run.
        budgets: Budgets on :data:`LATENCY_METRICS`.
        min_runs: Runs before the first look.
        rel_ci: The median's 95% half-width, as a fraction of it, to reach as well.
        max_seconds: Cap on the time spent in timed runs.
        max_runs: Cap on the runs.

    Returns:
        The run times and why they stopped: ``"decided"`` or ``"cap"``.
    """
    samples: list[float] = []
    look_at = max(min_runs, 1)
    start = time.perf_counter()
    while len(samples) < max_runs:
        samples.append(run_once())
        if len(samples) >= look_at:
            if _settled(samples, batch_size, budgets, rel_ci):
                return samples, "decided"
            look_at = math.ceil(len(samples) * _GROWTH)
        if time.perf_counter() - start > max_seconds:
            break
    return samples, "cap"


def _settled(
    samples: list[float], batch_size: int, budgets: Sequence[Budget], rel_ci: float
) -> bool:
    median = quantile_interval(samples, 0.5)
    if median.low_ms is None or median.high_ms is None or median.value_ms <= 0:
        return False
    if (median.high_ms - median.low_ms) / 2 / median.value_ms > rel_ci:
        return False
    return all(d.verdict != "within-noise" for d in decide_all(samples, batch_size, budgets))
