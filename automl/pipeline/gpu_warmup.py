"""A GPU's warm-up and state around a measurement.

A GPU idle for a moment runs at low clocks, and its first runs of a graph are slower still; a
fixed count of warm-up runs takes milliseconds there. So a device measurement warms up by
time: at least :data:`MIN_SECONDS`, then until the medians of two successive windows of runs
agree, or :data:`MAX_SECONDS`. The GPU's clocks, power state and temperature are read before
and after the timed runs, so that a throttled measurement shows.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from automl.targets.gpus import current_gpu, list_gpus
from automl.targets.nvidia_smi import query_gpus

if TYPE_CHECKING:
    from collections.abc import Callable

MIN_SECONDS = 1.0
MAX_SECONDS = 5.0
WINDOW_SECONDS = 0.25
SETTLED = 0.02  # successive windows' medians within 2 % of each other
_STATE = ("clocks.sm", "clocks.mem", "pstate", "temperature.gpu", "power.draw")


def warm_up_by_time(
    run_once: Callable[[], float],
    *,
    min_seconds: float = MIN_SECONDS,
    max_seconds: float = MAX_SECONDS,
    window_seconds: float = WINDOW_SECONDS,
) -> dict:
    """Run ``run_once`` until ``min_seconds`` have passed and its median time has settled.

    Returns:
        ``seconds`` spent, ``runs``, whether it ``settled`` (else ``max_seconds`` stopped it)
        and the ``last_window_p50_ms``.
    """
    start = time.perf_counter()
    runs, previous = 0, None
    while True:
        window = _window(run_once, window_seconds)
        runs += len(window)
        median = float(np.median(window))
        spent = time.perf_counter() - start
        settled = previous is not None and abs(median - previous) <= SETTLED * previous
        if (spent >= min_seconds and settled) or spent >= max_seconds:
            return {"seconds": spent, "runs": runs, "settled": settled,
                    "last_window_p50_ms": median}  # fmt: skip
        previous = median


def _window(run_once: Callable[[], float], seconds: float) -> list[float]:
    """Run times of one window: runs for ``seconds``, two at least."""
    times, end = [], time.perf_counter() + seconds
    while len(times) < 2 or time.perf_counter() < end:
        times.append(run_once())
    return times


def gpu_state() -> dict[str, str] | None:
    """Clocks, power state, temperature and power draw of this process's GPU, as ``nvidia-smi``
    reports them; None without one."""
    gpu = current_gpu(list_gpus())
    out = query_gpus("index," + ",".join(_STATE)) if gpu is not None else None
    for line in (out or "").splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == len(_STATE) + 1 and fields[0] == str(gpu.index):
            return dict(zip(_STATE, fields[1:], strict=True))
    return None
