"""Screening a serving study's trial before its load runs, and with its first.

A load run costs seconds; most candidates of a search never reach the front. A trial that
maximises ``max_rate_rps`` must serve more than the rate of :func:`rate_to_beat`: the best rate
measured under load by a trial at least as good on every other objective. Two screens stop a
trial that cannot:

- before any load run, where :func:`rate_bound`, the rate its isolated latency could serve at
  best, is already below that rate;
- after one load run, at that rate: where its p99 breaks the SLO there, its max rate is below it
  (see :func:`automl.pipeline.serving.max_rate`'s ``first_must_hold``).

Such a trial is PRUNED, with the measured trial that dominates it, and never enters the front:
every front point carries the load measurement its objective needs. So is a repeat, before its
stages: a trial whose params an earlier trial has measured under load or screened
(:func:`measured_twin`). Measuring one deployment again adds noise only, and the front would
keep its luckiest run. An untried deployment drawn at random (:func:`untried_params`) is queued
in its place, so that a sampler stuck on measured deployments explores instead.

Screened trials do not count towards ``n_trials``. Once the front holds the best that the space
can reach, every new trial is screened, so a run of :func:`converged_after` screened trials in a
row, repeats included, ends the study as converged (:func:`converged_reason`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import optuna

from automl.records import SCREENED

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    import numpy as np

    from automl.candidate import Batching
    from automl.search.space import SearchSpace
    from automl.search.spec import Serving, StudySpec
    from automl.targets import Target

# Trials screened out in a row after which a serving study's search has converged: at least
# this many, and this many per trial of its budget.
MIN_SCREENED_IN_A_ROW = 100
SCREENED_PER_TRIAL = 4

# The bound assumes every instance serves full batches back to back, each twice as fast as the
# isolated median: a margin for faster batches and for instances that overlap perfectly.
_MARGIN = 2.0


def rate_bound(batching: Batching, batch_size: int, latency_p50_ms: float) -> float | None:
    """An upper bound of the max rate, from the isolated latency at the batcher's largest
    batch; ``None`` where the isolated batch is another (no bound follows)."""
    if batch_size != batching.max_batch or latency_p50_ms <= 0:
        return None
    return _MARGIN * batching.instances * batching.max_batch / (latency_p50_ms / 1e3)


@dataclass(frozen=True)
class RateToBeat:
    """The max rate a trial must exceed not to be dominated, and the trial that holds it."""

    rps: float
    trial: int

    def above_bound(self, bound: float) -> str | None:
        """Why a trial whose max rate is at most ``bound`` is dominated; ``None`` where it may
        not be."""
        if self.rps <= bound:
            return None
        return (
            f"screened out before its load runs: its isolated latency bounds its max rate at "
            f"{bound:,.0f} requests/s, and trial {self.trial}, measured under load, beats it even "
            f"there ({self.rps:,.0f} requests/s)"
        )

    def not_beaten(self) -> str:
        """Why a trial that held this rate under load, but no higher one, is dominated."""
        return (
            f"screened out: it held {self.rps:,.0f} requests/s, the max rate of trial "
            f"{self.trial}, which is at least as good on every other objective, but no higher "
            "rate, so it adds nothing to the front"
        )

    def not_held(self, run: Mapping, slo_p99_ms: float) -> str:
        """Why a trial whose run at this rate (its record, see
        :meth:`automl.pipeline.serving.LoadRun.as_dict`) broke the SLO is dominated."""
        said = f"p99 {run['latency_ms']['p99']:.3g} ms" if run["kept_up"] else "it did not keep up"
        return (
            f"screened out after one load run: at {self.rps:,.0f} requests/s, the max rate of "
            f"trial {self.trial}, which is at least as good on every other objective, {said} "
            f"against an SLO of {slo_p99_ms:g} ms"
        )


def rate_to_beat(
    study: optuna.Study, spec: StudySpec, metrics: Mapping[str, float]
) -> RateToBeat | None:
    """The highest max rate of the feasible trials measured under load that are at least as
    good as ``metrics`` on every other objective; ``None`` where there is none, or where the
    study does not maximise ``max_rate_rps``."""
    others = [o for o in spec.objectives if o.metric != "max_rate_rps"]
    if len(others) == len(spec.objectives) or any(o.metric not in metrics for o in others):
        return None
    best = None
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    for trial in complete:
        theirs = trial.user_attrs
        rate = theirs.get("max_rate_rps") if theirs.get("feasible") else None
        if rate is None or (best is not None and rate <= best.rps):
            continue
        if all(_at_least(theirs.get(o.metric), metrics[o.metric], o.direction) for o in others):
            best = RateToBeat(rate, trial.number)
    return best


def serve_screened(
    model_path: Path,
    target: Target,
    rows: np.ndarray,
    batching: Batching,
    latency_p50_ms: float,
    scenario: Serving,
    *,
    batch_size: int,
    method: str,
    to_beat: RateToBeat | None,
    optimization: str = "all",
    seed: int = 0,
    probes: int | None = None,
) -> dict:
    """The graph under the scenario's load (see :func:`automl.pipeline.serving.measure_serving`),
    its max-rate search started from its isolated latency at ``batch_size``, unless a screen
    stops it: no load run where that latency bounds its max rate below ``to_beat``, no more
    runs where the first, at ``to_beat``, breaks the SLO, and no metrics where no rate above
    ``to_beat`` holds (a tie adds nothing to the front). The record of a screened graph says
    why, as ``screened``. ``probes``: the max-rate search's runs, where not the usual.

    The load runs are measured once more where the host was busy while they ran (see
    :func:`automl.pipeline.serving_floor.measured_clean`), and the record holds the harness's
    floor after them; :func:`automl.pipeline.serving_floor.busy_host` says whether they are a
    clean measurement."""
    # Here, not at the top: the objective imports this module, and ONNX Runtime only runs trials.
    from automl.pipeline.serving import MAX_RATE_PROBES, first_rate, measure_serving
    from automl.pipeline.serving_floor import measured_clean

    bound = rate_bound(batching, batch_size, latency_p50_ms)
    if to_beat and bound and (reason := to_beat.above_bound(bound)):
        return {"metrics": {}, "record": {"screened": reason, "rate_bound_rps": bound}}
    served = measured_clean(lambda: measure_serving(
        model_path, target, rows, batching, scenario, method=method,
        start_rps=first_rate(batching, batch_size, latency_p50_ms),
        rate_to_beat=to_beat and to_beat.rps, optimization=optimization, seed=seed,
        probes=probes or MAX_RATE_PROBES,
    ), scenario)  # fmt: skip
    record = served["record"]
    if record.get("held_rate_to_beat") is False:
        (run,) = record["runs"]
        record["screened"] = to_beat.not_held(run, scenario.slo_p99_ms)
    elif record.get("beat_rate_to_beat") is False:
        record["screened"] = to_beat.not_beaten()
    return served


def _at_least(theirs: float | None, ours: float, direction: str) -> bool:
    if theirs is None:
        return False
    return theirs >= ours if direction == "maximize" else theirs <= ours


def measured_twin(study: optuna.Study, params: Mapping[str, object], number: int) -> int | None:
    """The number of an earlier trial of ``study`` with ``params`` that was measured under load
    (COMPLETE) or screened; ``None`` where there is none."""
    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    for trial in study.get_trials(deepcopy=False, states=done):
        measured = trial.state == optuna.trial.TrialState.COMPLETE or SCREENED in trial.user_attrs
        if trial.number != number and measured and trial.params == params:
            return trial.number
    return None


def untried_params(
    study: optuna.Study, space: SearchSpace, rng: np.random.Generator, tries: int = 32
) -> dict | None:
    """Params drawn at random from ``space`` that no trial of ``study`` has (queued ones
    included); ``None`` where ``tries`` draws all have some."""
    trials = study.get_trials(deepcopy=False)
    taken = [t.params or t.system_attrs.get("fixed_params") for t in trials]
    for _ in range(tries):
        params = space.draw(rng)
        if params not in taken:
            return params
    return None


def repeat_reason(twin: int, redirected: bool) -> str:
    """Why a repeat of trial ``twin``'s deployment is screened; ``redirected``: an untried
    deployment is queued in its place."""
    instead = "; an untried deployment, drawn at random, is queued instead" if redirected else ""
    return (
        f"screened out before its stages: trial {twin} has measured this deployment, and "
        f"measuring it again would add only noise{instead}"
    )


def converged_after(n_trials: int | None) -> int:
    """How many trials screened out in a row end a serving study of ``n_trials``."""
    return max(MIN_SCREENED_IN_A_ROW, SCREENED_PER_TRIAL * (n_trials or 0))


def converged_reason(screened: int) -> str:
    """Why a serving study whose last ``screened`` trials were all screened out has ended."""
    return (
        f"converged: its last {screened} trials in a row were screened out (dominated by the "
        "front, or repeats of measured deployments), so none reached the front"
    )
