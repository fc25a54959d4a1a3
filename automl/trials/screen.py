"""Screening a serving study's trial by its isolated latency, before its load runs.

A load run costs seconds; most candidates of a search never reach the front. Before serving a
trial, :func:`rate_bound` bounds the rate it could serve from its isolated latency, and
:func:`screened_out` asks whether a trial already measured under load beats it even at that
bound. Such a trial is PRUNED, with the measured trial that dominates it, and never enters the
front: every front point carries the load measurement its objective needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import optuna

if TYPE_CHECKING:
    from collections.abc import Mapping

    from automl.candidate import Batching
    from automl.search.spec import StudySpec

# The bound assumes every instance serves full batches back to back, each twice as fast as the
# isolated median: a margin for faster batches and for instances that overlap perfectly.
_MARGIN = 2.0


def rate_bound(batching: Batching, batch_size: int, latency_p50_ms: float) -> float | None:
    """An upper bound of the max rate, from the isolated latency at the batcher's largest
    batch; ``None`` where the isolated batch is another (no bound follows)."""
    if batch_size != batching.max_batch or latency_p50_ms <= 0:
        return None
    return _MARGIN * batching.instances * batching.max_batch / (latency_p50_ms / 1e3)


def screened_out(
    study: optuna.Study, spec: StudySpec, metrics: Mapping[str, float], bound: float
) -> str | None:
    """Why the trial cannot reach the front even at a max rate of ``bound``: the measured
    trial that dominates it; ``None`` where none does, or where the study does not maximise
    ``max_rate_rps``."""
    if "max_rate_rps" not in spec.metric_names:
        return None
    ours = {**metrics, "max_rate_rps": bound}
    if any(m not in ours for m in spec.metric_names):
        return None
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    for other in complete:
        theirs = other.user_attrs
        if other.user_attrs.get("feasible") and _dominates(theirs, ours, spec):
            return (
                f"screened out before its load runs: its isolated latency bounds its max rate "
                f"at {bound:,.0f} requests/s, and trial {other.number}, measured under load, "
                f"beats it even there ({theirs['max_rate_rps']:,.0f} requests/s)"
            )
    return None


def _dominates(theirs: Mapping, ours: Mapping, spec: StudySpec) -> bool:
    """Whether ``theirs`` is at least as good on every objective and better on one."""
    better = False
    for objective in spec.objectives:
        a, b = theirs.get(objective.metric), ours[objective.metric]
        if a is None:
            return False
        sign = 1 if objective.direction == "maximize" else -1
        if sign * (a - b) < 0:
            return False
        better = better or sign * (a - b) > 0
    return better
