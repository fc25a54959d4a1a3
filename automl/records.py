"""The trial-record vocabulary: the attr keys a trial is written with and every reader uses.

A leaf: the objective writes these, and the service, the fleet, the API and the report read
them, without importing the objective.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

from optuna.study._constrained_optimization import _CONSTRAINTS_KEY

TrialStateName = Literal["COMPLETE", "FAIL", "RUNNING", "WAITING", "PRUNED"]
TRIAL_STATES: tuple[str, ...] = get_args(TrialStateName)  # as Optuna's TrialState names them
SPEC_ATTR = "automl_spec"  # the study user attr holding its spec: marks an automl study
FAIL_REASON = "fail_reason"
OVER_BUDGET = "over_budget"  # a trial that lost the race for the last slot: PRUNED, never run
ARTIFACT_ID = "artifact_id"
WORKER = "worker"  # host:pid of the process that ran the trial
BASELINE = "baseline"  # marks the unmodified trained model's trial (a trained model's study)


def violated(system_attrs: dict) -> list[int]:
    """The indices of the study's constraints that a trial violates (its value > 0)."""
    return [i for i, value in enumerate(system_attrs.get(_CONSTRAINTS_KEY) or []) if value > 0]


def constraint_attrs(violations: list[float]) -> dict[str, list[float]]:
    """The system attr of the constraint violations (≤ 0 is feasible).

    It is Optuna's list format, ``constraints``, which Optuna reads as constraints ``"0"``,
    ``"1"``, …, and which optuna-dashboard 0.21 reads (it ignores ``constraints:<key>``, the
    format of ``Trial.set_constraint``). Writing one format only keeps ``optuna.load_study``
    free of its "Overwrite an old format constraint" warning. The constraints' names are the
    study's ``constraints`` user attr, in the same order.

    Raises:
        ValueError: A violation is NaN, which Optuna does not allow either.
    """
    if any(math.isnan(v) for v in violations):
        raise ValueError(f"a constraint's violation is NaN: {violations}")
    if not violations:
        return {}
    return {_CONSTRAINTS_KEY: [float(v) for v in violations]}
