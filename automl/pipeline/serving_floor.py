"""What the load harness alone takes on this host, and whether a serving trial's load figures
were measured while it took too much.

The harness runs in Python on the host's cores. When the host is busy (other processes, a
concurrent reader of the API), its own latency rises, and a trial's p99 and max rate measure
the host rather than the deployment: one setting served 20,490 requests/s on a quiet host and
9,117 on a busy one. :func:`host_floor` is one measurement of that cost, taken before a study
starts (:func:`automl.fleet.preflight.check_harness`) and after each trial's load runs
(:func:`measured_clean`), and judged against one limit, :data:`MAX_FLOOR_SHARE` of the SLO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from automl.candidate import Batching
from automl.pipeline.serving import harness_floor

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from automl.search.spec import Serving

# The harness's own p99 may be at most this share of a serving study's SLO: checked before a
# study starts, and after each trial's load runs.
MAX_FLOOR_SHARE = 0.1
# The rate at which the floor is measured where the study searches the max rate.
NOMINAL_RPS = 1000.0
_RUNS = 3  # the best of these, so that one burst of a shared host does not count
_RUN_S = 0.5  # each at most this long


@dataclass(frozen=True)
class Floor:
    """The harness's own p99 on this host, at a rate, against a study's SLO."""

    p99_ms: float
    rate_rps: float
    slo_p99_ms: float

    @property
    def share(self) -> float:
        """The floor's share of the SLO."""
        return self.p99_ms / self.slo_p99_ms

    @property
    def too_high(self) -> bool:
        """Whether the harness alone takes more than :data:`MAX_FLOOR_SHARE` of the SLO."""
        return self.share > MAX_FLOOR_SHARE


def host_floor(scenario: Serving) -> Floor:
    """The harness's floor on this host now, as a study's start check and each of its trials
    measure it.

    A model that does nothing, one instance, batch 1, no queue delay, at the scenario's rate
    (:data:`NOMINAL_RPS` where it is ``max``), in runs of at most half a second: the best of
    three, with no more runs once one is within :data:`MAX_FLOOR_SHARE`. It measures the host,
    not a trial's settings: with those, the floor would include the batcher's queue delay (a
    choice of the deployment) and, at two instances, two threads of a model that never
    releases the GIL waiting on each other (ONNX Runtime releases it).
    """
    rate = NOMINAL_RPS if scenario.rate_rps == "max" else float(scenario.rate_rps)
    rows, seconds = np.zeros((64, 1), np.float32), min(scenario.duration_s, _RUN_S)
    floors = []
    for seed in range(_RUNS):
        run = harness_floor(rows, Batching(), rate, duration_s=seconds, seed=seed)
        floors.append(Floor(run.p99_bound_ms, rate, scenario.slo_p99_ms))
        if not floors[-1].too_high:
            break
    return min(floors, key=lambda floor: floor.p99_ms)


def measured_clean(measure: Callable[[], dict], scenario: Serving) -> dict:
    """``measure()`` (a serving measurement, see
    :func:`automl.pipeline.serving.measure_serving`) between two floors of the host, the worse
    of which is its floor; where that is above :data:`MAX_FLOOR_SHARE` of the SLO, the host was
    busy while it ran (a load that ended before the floor after it is caught by the one before),
    and it is measured once more, between two floors again.

    Returns:
        The last measurement, its record with the floor (``floor_p99_ms``, ``floor_rps``,
        ``floor_share_of_slo``) and, where it was measured again, the first floor's share
        (``floor_share_before_remeasure``). :func:`busy_host` says whether it is still above.
    """
    served, floor = _between_floors(measure, scenario)
    first = None
    if floor.too_high:
        first = floor
        served, floor = _between_floors(measure, scenario)
    served["record"].update(
        floor_p99_ms=floor.p99_ms, floor_rps=floor.rate_rps, floor_share_of_slo=floor.share
    )
    if first is not None:
        served["record"]["floor_share_before_remeasure"] = first.share
    return served


def _between_floors(measure: Callable[[], dict], scenario: Serving) -> tuple[dict, Floor]:
    """``measure()`` and the worse of the host's floors just before and just after it."""
    before = host_floor(scenario)
    served = measure()
    return served, max(before, host_floor(scenario), key=lambda floor: floor.share)


def busy_host(record: Mapping) -> str | None:
    """Why a trial's load figures (its serving ``record``, see :func:`measured_clean`) are not
    a clean measurement: the floor around them was above :data:`MAX_FLOOR_SHARE` of the SLO,
    and still above it after they were measured again; ``None`` where they are clean."""
    share = record.get("floor_share_of_slo")
    if share is None or share <= MAX_FLOOR_SHARE:
        return None
    return (
        f"the load harness alone took p99 {record['floor_p99_ms']:.3g} ms at "
        f"{record['floor_rps']:,.0f} requests/s, {share:.2f} of the SLO (limit "
        f"{MAX_FLOOR_SHARE:.2f}), next to its load runs, and again when they were measured "
        "once more: the host was too busy to measure this deployment; rerun on a quieter host"
    )
