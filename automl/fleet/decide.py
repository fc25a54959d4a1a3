"""Picking the Pareto trial to export, under a budget that survives latency noise.

A trial's latency percentiles come from a few dozen timed runs: two identical studies can
record a p99 of 0.66 ms and of 2.89 ms for the same model. So a budget on latency is decided on
new runs of the front's models on this machine (see :func:`automl.fleet.remeasure.remeasure_front`),
and a trial whose interval straddles the budget is not picked silently.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Literal

from pydantic import ValidationError

from automl.errors import SpecError, validation_message
from automl.pipeline.latency_decision import LATENCY_METRICS, BudgetDecision
from automl.records import METRICS
from automl.search.objectives import Constraint
from automl.service.read import empty_front_reason, pareto_front
from automl.service.studies import TrialNotFound, load
from automl.targets import is_present, load_target

if TYPE_CHECKING:
    from collections.abc import Mapping

    from optuna.artifacts import FileSystemArtifactStore
    from optuna.storages import BaseStorage


@dataclass(frozen=True)
class Pick:
    """The chosen trial and how it was chosen.

    Attributes:
        number: The trial.
        basis: ``"re-measured"`` when a latency budget was decided on new runs here,
            ``"recorded"`` when the study's figures were used.
        notes: Lines to show the user: better trials passed over and why, the pick's interval,
            or that the pick is unverified.
        decisions: Trial number → the budget's decision (as a dict), when re-measured.
    """

    number: int
    basis: Literal["recorded", "re-measured"]
    notes: tuple[str, ...] = ()
    decisions: dict[int, dict] = field(default_factory=dict, hash=False)

    def as_dict(self) -> dict:
        """Plain JSON-able values."""
        return asdict(self)


def pick_trial(
    name: str,
    storage: BaseStorage,
    metric: str,
    budget: str | None = None,
    *,
    artifact_store: FileSystemArtifactStore | None = None,
    max_seconds: float = 5.0,
) -> Pick:
    """Pick the Pareto trial best on ``metric``, optionally under a budget.

    A budget on a latency metric is decided on new runs of every front model here, given the
    ``artifact_store`` and the study's target; otherwise on the recorded figures, and the pick
    says it is unverified.

    Args:
        name: The study.
        storage: Its storage.
        metric: The metric to optimise, in its natural direction (e.g. ``accuracy``).
        budget: A constraint such as ``latency_p99_ms <= 2``.
        artifact_store: Where the study's models are, to re-measure them.
        max_seconds: Cap on each model's re-measurement.

    Returns:
        The pick.

    Raises:
        SpecError: Unknown metric or malformed budget.
        TrialNotFound: No front trial meets the budget (within noise ones are named).
    """
    if metric not in METRICS:
        raise SpecError(f"unknown metric {metric!r}; allowed: {list(METRICS)}")
    limit = _parse_budget(budget)
    front = pareto_front(name, storage)
    if not front:
        raise TrialNotFound(empty_front_reason(name, storage))
    if limit is None or limit.metric not in LATENCY_METRICS:
        return Pick(_best_on_records(front, metric, limit, name), "recorded")
    target = load_target(load(name, storage)[1].target)
    if artifact_store is None or not is_present(target):
        why = "no artifact store" if artifact_store is None else f"no {target.name} here"
        note = f"picked on the study's recorded figures, unverified ({why} to re-measure on)"
        return Pick(_best_on_records(front, metric, limit, name), "recorded", (note,))
    from automl.fleet.remeasure import remeasure_front

    remeasured = remeasure_front(
        name, storage, artifact_store, budgets=[limit], max_seconds=max_seconds
    )
    decisions = {n: BudgetDecision(**r["decisions"][0]) for n, r in remeasured.items()}
    # A study still running may have moved its front since it was read above.
    return pick_among([r for r in front if r["number"] in decisions], metric, decisions)


def pick_among(front: list[dict], metric: str, decisions: Mapping[int, BudgetDecision]) -> Pick:
    """The trial best on ``metric`` whose budget decision is ``meets``.

    Better trials passed over get a note each (within noise, or exceeding), and so does the pick.

    Args:
        front: Trial records (see :func:`automl.service.read.trial_record`); ties on ``metric`` go to
            a record on the front, then to the earlier one.
        metric: The metric to optimise, in its natural direction.
        decisions: Each front trial's decision of the budget, by trial number.

    Returns:
        The pick, on the ``re-measured`` basis.

    Raises:
        TrialNotFound: No trial meets the budget.
    """
    notes = []
    for record in _ranked(front, metric):
        decision = decisions[record["number"]]
        shown = f"trial {record['number']} ({metric} {record['metrics'][metric]:.4g})"
        if decision.verdict == "meets":
            notes.append(f"picked {shown}: {decision.reason}")
            as_dicts = {n: d.as_dict() for n, d in decisions.items()}
            return Pick(record["number"], "re-measured", tuple(notes), as_dicts)
        state = "is within noise of" if decision.verdict == "within-noise" else "exceeds"
        notes.append(f"{shown} {state} the budget: {decision.reason}")
    budget = next(iter(decisions.values()), None)
    shown = f"{budget.metric} {budget.op} {budget.bound:g}" if budget else "the budget"
    raise TrialNotFound(f"no Pareto trial meets {shown} when re-measured: " + "; ".join(notes))


def _parse_budget(budget: str | None) -> Constraint | None:
    try:
        return Constraint.model_validate(budget) if budget else None
    except ValidationError as e:
        raise SpecError(f"invalid budget: {validation_message(e.errors()[0])}") from None


def _ranked(front: list[dict], metric: str) -> list[dict]:
    """Best on ``metric`` first; of equals, the front's own trials before a baseline shown
    beside it (dominated: a trial of the front is as good and better elsewhere), then by
    number."""
    sign = 1 if METRICS[metric] == "maximize" else -1
    return sorted(front, key=lambda t: (-sign * t["metrics"][metric], not t.get("on_front", True)))


def _best_on_records(front: list[dict], metric: str, limit: Constraint | None, name: str) -> int:
    kept = [t for t in front if limit is None or limit.violation(t["metrics"]) <= 0]
    if not kept:
        raise TrialNotFound(f"no Pareto trial of {name!r} meets '{limit}'")
    return _ranked(kept, metric)[0]["number"]
