"""Serving stage: a model under an open-loop Poisson load, batched by Triton's dynamic-batcher rules.

:func:`measure_load` replays a precomputed arrival schedule against the clock. There is no
generator thread: the serving threads themselves (one per model instance) take the requests
whose arrival time has passed, so arrivals never wait for a response (open loop by
construction), and the harness adds no queue hand-off of its own. A thread forms a batch as
Triton's dynamic batcher does: when ``max_batch`` requests are waiting, or when the oldest has
waited ``max_queue_delay_ms``, it takes every waiting request up to ``max_batch``. A request's
latency runs from its arrival to the end of its batch, queueing included.

A run that cannot keep up is recorded as such: requests still waiting at the deadline are
counted as dropped, never extrapolated. :func:`harness_floor` measures the same schedule against
a model that does nothing, which is what the harness itself costs at that rate.
"""

from __future__ import annotations

import gc
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from automl.candidate import MAX_LOAD_REQUESTS, Batching
from automl.catalog.runtimes._ort import feed, input_dtype, input_name
from automl.errors import SpecError, TrialFailed
from automl.pipeline.timers import backend_session

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from automl.search.spec import Serving
    from automl.targets import Target

# How long before a target time a waiting thread stops sleeping and spins: sleep overshoots by
# about 0.1 ms on Linux.
_SPIN_S = 2e-4


@dataclass(frozen=True)
class LoadRun:
    """One run at one offered rate.

    Attributes:
        offered_rps: The Poisson rate of the arrival schedule.
        achieved_rps: Completed requests over the time from the first arrival to the last
            completion.
        requests: Requests in the schedule.
        completed: Requests served before the deadline.
        dropped: Requests still waiting at the deadline: the run did not keep up.
        latency_ms: p50, p90, p99 and p99.9 of the completed requests, arrival to result.
        p99_bound_ms: The p99 with each dropped request counted as waiting until the deadline:
            a lower bound of the true p99 where the run did not keep up, and the p99 where it
            did.
        queue_ms: Mean time from arrival to the start of the request's batch.
        compute_ms: Mean time of a batch's model call.
        batch_sizes: How many batches of each size ran.
    """

    offered_rps: float
    achieved_rps: float
    requests: int
    completed: int
    dropped: int
    latency_ms: dict[str, float]
    queue_ms: float
    compute_ms: float
    p99_bound_ms: float
    batch_sizes: dict[int, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        """Plain JSON-able form (batch sizes keyed by their text), with ``kept_up``."""
        return {
            **{k: v for k, v in self.__dict__.items() if k != "batch_sizes"},
            "batch_sizes": {str(k): v for k, v in self.batch_sizes.items()},
            "kept_up": self.kept_up,
        }

    @property
    def kept_up(self) -> bool:
        """Whether every request was served before the deadline."""
        return self.dropped == 0

    def p99_within(self, slo_ms: float) -> bool:
        """Whether the run kept up with a p99 at most ``slo_ms``."""
        return self.kept_up and self.latency_ms["p99"] <= slo_ms


def arrival_schedule(rate_rps: float, duration_s: float, seed: int = 0) -> np.ndarray:
    """Poisson arrival times in seconds from 0: exponential gaps at ``rate_rps``, seeded."""
    if rate_rps <= 0 or duration_s <= 0:
        raise SpecError(f"a load needs a rate and a duration above 0, got {rate_rps}, {duration_s}")
    rng = np.random.default_rng(seed)
    expected = rate_rps * duration_s
    if expected > MAX_LOAD_REQUESTS:
        raise SpecError(
            f"{rate_rps:,.0f} requests/s for {duration_s:g} s is over {MAX_LOAD_REQUESTS:,} requests "
            "in one run: lower the rate or the duration"
        )
    gaps = rng.exponential(1.0 / rate_rps, size=int(expected + 6 * np.sqrt(expected) + 10))
    times = np.cumsum(gaps)
    return times[times < duration_s]


def measure_load(
    instances: Sequence[Callable[[np.ndarray], object]],
    rows: np.ndarray,
    batching: Batching,
    rate_rps: float,
    *,
    duration_s: float = 2.0,
    seed: int = 0,
    deadline_s: float | None = None,
) -> LoadRun:
    """Serve a Poisson schedule at ``rate_rps`` with ``instances`` (one callable each).

    Args:
        instances: One callable per model instance, taking a batch of rows; their count must be
            ``batching.instances``.
        rows: Sample inputs; request ``i`` sends row ``i % len(rows)``.
        batching: The dynamic-batching settings.
        rate_rps: The offered rate, requests per second.
        duration_s: The length of the schedule.
        seed: Seed of the arrival schedule.
        deadline_s: When, from the first arrival, waiting requests are dropped; by default the
            schedule's length plus a second.

    Returns:
        The run: latency percentiles, achieved rate, drops, batch sizes, queue against compute.
    """
    if len(instances) != batching.instances:
        raise SpecError(f"{batching.instances} instances configured, {len(instances)} given")
    arrivals = arrival_schedule(rate_rps, duration_s, seed)
    state = _Replay(
        arrivals, rows, batching, duration_s + 1.0 if deadline_s is None else deadline_s
    )
    threads = [threading.Thread(target=state.serve, args=(run,)) for run in instances]
    collecting = gc.isenabled()
    gc.disable()  # a collection pass in a run would be the harness's latency (timeit does this)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        if collecting:
            gc.enable()
    return state.result(rate_rps)


def harness_floor(
    rows: np.ndarray, batching: Batching, rate_rps: float, *, duration_s: float = 2.0, seed: int = 0
) -> LoadRun:
    """The same schedule served by models that return at once: the harness's own latency."""
    return measure_load(
        [_null_model] * batching.instances,
        rows,
        batching,
        rate_rps,
        duration_s=duration_s,
        seed=seed,
    )


def _null_model(batch: np.ndarray) -> None:
    return None


class _Replay:
    """The shared state of one run: the schedule, the next request to take, what was done."""

    def __init__(
        self, arrivals: np.ndarray, rows: np.ndarray, batching: Batching, deadline_s: float
    ) -> None:
        self.arrivals, self.rows, self.batching = arrivals, rows, batching
        self.delay_s = batching.max_queue_delay_ms / 1e3
        self.deadline_s = deadline_s
        self.head = 0  # the oldest request not yet taken
        self.lock = threading.Lock()
        self.done_s = np.full(len(arrivals), np.nan)  # each request's completion
        self.started_s = np.full(len(arrivals), np.nan)  # its batch's start
        self.batches: list[tuple[int, float]] = []  # (size, compute seconds)
        self.t0 = time.perf_counter() + 0.005  # a moment to start every thread

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def serve(self, run: Callable[[np.ndarray], object]) -> None:
        """Take batches as the batcher's rules allow, run them, until none is left."""
        while (taken := self._take()) is not None:
            first, last = taken
            indices = np.arange(first, last) % len(self.rows)
            start = self.now()
            run(self.rows[indices])
            end = self.now()
            with self.lock:
                self.started_s[first:last] = start
                self.done_s[first:last] = end
                self.batches.append((last - first, end - start))

    def _take(self) -> tuple[int, int] | None:
        """The next batch ``[first, last)``, once it may form; None when the run is over."""
        while True:
            with self.lock:
                first = self.head
                if first >= len(self.arrivals) or self.now() > self.deadline_s:
                    return None
                ready = self._ready_at(first)
                now = self.now()
                if now >= ready:
                    last = min(
                        first + self.batching.max_batch,
                        int(np.searchsorted(self.arrivals, now, side="right")),
                    )
                    self.head = max(last, first + 1)
                    return first, self.head
            _wait_until(self, min(ready, self.deadline_s))

    def _ready_at(self, first: int) -> float:
        """When the batch that starts at request ``first`` may form: full, or its oldest has
        waited the queue delay."""
        full = first + self.batching.max_batch - 1
        flush = self.arrivals[first] + self.delay_s
        if full < len(self.arrivals):
            return max(self.arrivals[first], min(self.arrivals[full], flush))
        return flush

    def result(self, rate_rps: float) -> LoadRun:
        served = ~np.isnan(self.done_s)
        latency = (self.done_s[served] - self.arrivals[served]) * 1e3
        waited = (np.where(served, self.done_s, self.deadline_s) - self.arrivals) * 1e3
        queue = (self.started_s[served] - self.arrivals[served]) * 1e3
        span = (np.nanmax(self.done_s) - self.arrivals[0]) if served.any() else float("nan")
        percentiles = dict(zip(("p50", "p90", "p99", "p99.9"), (50, 90, 99, 99.9), strict=True))
        return LoadRun(
            offered_rps=rate_rps,
            achieved_rps=float(served.sum() / span) if served.any() and span > 0 else 0.0,
            requests=len(self.arrivals),
            completed=int(served.sum()),
            dropped=int((~served).sum()),
            latency_ms={k: float(np.percentile(latency, q)) for k, q in percentiles.items()}
            if served.any()
            else {},
            queue_ms=float(queue.mean()) if served.any() else 0.0,
            p99_bound_ms=float(np.percentile(waited, 99)),
            compute_ms=float(np.mean([s for _, s in self.batches]) * 1e3) if self.batches else 0.0,
            batch_sizes=dict(sorted(Counter(size for size, _ in self.batches).items())),
        )


def _wait_until(replay: _Replay, target_s: float) -> None:
    """Sleep until ``target_s`` on the run's clock, spinning the last fraction of a millisecond."""
    while (left := target_s - replay.now()) > 0:
        if left > _SPIN_S:
            time.sleep(left - _SPIN_S)


def max_rate(
    measure: Callable[[float], LoadRun],
    slo_p99_ms: float,
    start_rps: float,
    *,
    probes: int = 8,
    first_must_hold: bool = False,
) -> tuple[float, list[LoadRun]]:
    """The highest offered rate whose run keeps up with a p99 within ``slo_p99_ms``.

    As MLPerf's server scenario finds its rate: the rate doubles from ``start_rps`` until a run
    breaks the bound (or halves until one keeps it), then bisects between the last rate that
    held and the first that broke, ``probes`` runs in all. With ``first_must_hold`` (a rate that
    the model must serve to matter), a first run that breaks the bound ends the search.

    Returns:
        The rate found (0 when none held) and every run, in the order measured: the curve of
        p99 against the offered rate.
    """
    runs: list[LoadRun] = []
    held, broke, rate = 0.0, None, start_rps
    for _ in range(probes):
        run = measure(rate)
        runs.append(run)
        if run.p99_within(slo_p99_ms):
            held = rate
            rate = rate * 2 if broke is None else (held + broke) / 2
        elif first_must_hold and len(runs) == 1:
            break
        else:
            broke = rate
            rate = (held + broke) / 2 if held else rate / 2
    return held, runs


def first_rate(batching: Batching, batch_size: int, latency_p50_ms: float) -> float:
    """Where a max-rate search starts: a quarter of what the instances could serve at the
    isolated latency of ``batch_size``, within 10 and 10⁶ requests/s."""
    capacity = batching.instances * batch_size / max(latency_p50_ms / 1e3, 1e-6)
    return min(max(capacity / 4, 10.0), 1e6)


# Load runs of the max-rate search: doublings from the first guess, then bisections.
MAX_RATE_PROBES = 6
_WARMUP_RUNS = 5


def measure_serving(
    model_path: Path,
    target: Target,
    rows: np.ndarray,
    batching: Batching,
    scenario: Serving,
    *,
    method: str,
    start_rps: float,
    rate_to_beat: float | None = None,
    optimization: str = "all",
    seed: int = 0,
    probes: int = MAX_RATE_PROBES,
) -> dict:
    """Serve the deployed graph under a study's scenario, on the target's backend.

    One session per instance, the target's threads split between them. At an offered rate,
    one run; at ``rate_rps: max``, the max-rate search from ``start_rps`` (a guess from the
    isolated latency), or from ``rate_to_beat`` where that is higher: a rate below which the
    model does not matter, so that a first run that breaks the SLO there ends the search.
    ``probes`` bounds the search's runs (more resolve the max rate more finely). What the
    harness alone takes on the host is measured apart (see
    :func:`automl.pipeline.serving_floor.measured_clean`).

    Returns:
        ``metrics`` (``serving_p99_ms``, ``max_rate_rps`` where searched) and ``record``: the
        scenario, the settings and every run (the curve of p99 against the offered rate).
        Where it started at ``rate_to_beat``, the record says whether that rate held
        (``held_rate_to_beat``) and whether a higher one did (``beat_rate_to_beat``); the
        metrics are empty unless one did.

    Raises:
        TrialFailed: No request was served at any rate tried.
    """
    threads = max(1, target.intra_op_threads // batching.instances)
    sessions = [
        backend_session(model_path, target, method, optimization=optimization, threads=threads)
        for _ in range(batching.instances)
    ]
    name, x = input_name(sessions[0]), feed(rows, input_dtype(sessions[0]))
    runs = [lambda batch, s=s: s.run(None, {name: batch}) for s in sessions]
    for run in runs:  # warm up: a session's first runs at a batch size are slow
        for size in {1, batching.max_batch}:
            for _ in range(_WARMUP_RUNS):
                run(x[np.arange(size) % len(x)])

    def measure(rate: float) -> LoadRun:  # the search's doublings stop at the largest run
        rate = min(rate, MAX_LOAD_REQUESTS / scenario.duration_s)
        return measure_load(runs, x, batching, rate, duration_s=scenario.duration_s, seed=seed)

    challenge = rate_to_beat is not None and rate_to_beat >= start_rps
    if scenario.rate_rps == "max":
        rate, curve = max_rate(
            measure, scenario.slo_p99_ms, rate_to_beat if challenge else start_rps,
            probes=probes, first_must_hold=challenge,
        )  # fmt: skip
        at = next((r for r in curve if r.offered_rps == rate), min(curve, key=_offered))
        metrics = {"max_rate_rps": rate, "serving_p99_ms": at.p99_bound_ms}
        if challenge and rate <= rate_to_beat:  # it broke the SLO at the rate, or held no more
            metrics = {}
    else:
        at = measure(float(scenario.rate_rps))
        curve, metrics = [at], {"serving_p99_ms": at.p99_bound_ms}
    if not any(run.completed for run in curve):
        raise TrialFailed(f"served no request within {scenario.duration_s + 1:g} s at any rate")
    record = {
        "scenario": scenario.model_dump(),
        "settings": asdict(batching),
        "runs": [run.as_dict() for run in sorted(curve, key=_offered)],
        # False where every rate tried held: max_rate_rps is then a lower bound.
        "bracketed": any(not run.p99_within(scenario.slo_p99_ms) for run in curve),
        **(_challenged(rate, metrics) if challenge else {}),
    }
    return {"metrics": metrics, "record": record}


def _challenged(rate: float, metrics: dict) -> dict:
    """Whether a search started at the rate to beat held it, and whether it beat it."""
    return {"held_rate_to_beat": bool(rate), "beat_rate_to_beat": bool(metrics)}


def _offered(run: LoadRun) -> float:
    return run.offered_rps
