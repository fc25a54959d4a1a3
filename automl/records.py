"""The trial-record vocabulary: the attr keys a trial is written with and every reader uses.

A leaf: the objective writes these, and the service, the fleet, the API and the report read
them, without importing the objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from optuna.study._constrained_optimization import _CONSTRAINTS_KEY

if TYPE_CHECKING:
    from collections.abc import Mapping

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


@dataclass(frozen=True)
class Column:
    """A recorded metric as every view shows it: the CLI's tables, the report and the API.

    Attributes:
        key: The metric's name in a trial's record (``metrics`` of a front row).
        label: The column's heading.
        fmt: Its format, e.g. ``"{:.4f}"``.
        unit: Its unit, where it has one (``"ms"``, ``"MB"``, ``"×"``).
        brief: Shown in the terminal's table too, not only in the report and the API.
    """

    key: str
    label: str
    fmt: str
    unit: str = ""
    brief: bool = True

    def text(self, metrics: Mapping[str, float]) -> str | None:
        """The cell of ``metrics`` in this column; ``None`` where the trial lacks the metric."""
        value = shown_metrics(metrics).get(self.key)
        return None if value is None else self.fmt.format(value)


# The front's columns, in the order every view shows them. ``accuracy_gap`` is derived.
FRONT_COLUMNS = (
    Column("accuracy", "val acc", "{:.4f}"),
    Column("test_accuracy", "test acc", "{:.4f}"),
    Column("accuracy_gap", "val − test", "{:+.4f}", brief=False),
    Column("latency_per_sample_ms", "ms/sample", "{:.4g}", "ms"),
    Column("latency_p50_ms", "p50 ms", "{:.4g}", "ms"),
    Column("latency_p99_ms", "p99 ms", "{:.4g}", "ms"),
    Column("throughput_sps", "samples/s", "{:,.0f}", "samples/s"),
    Column("size_mb", "MB", "{:.4f}", "MB"),
    Column("macs", "MACs", "{:,.0f}"),
)
# Against the baseline, in a trained model's study: shown before the others.
BASELINE_COLUMNS = (
    Column("speedup", "speedup", "{:.2f}×", "×"),
    Column("speedup_same_batch", "at the same batch", "{:.2f}×", "×", brief=False),
    Column("accuracy_drop", "acc drop", "{:+.4f}"),
    Column("size_ratio", "size ratio", "{:.3f}", brief=False),
)


def front_columns(trained_model: bool, *, brief: bool = False) -> tuple[Column, ...]:
    """The columns of a study's front: a trained model's study leads with its baseline's.

    ``brief`` keeps those that a terminal's table shows (:attr:`Column.brief`).
    """
    columns = (*BASELINE_COLUMNS, *FRONT_COLUMNS) if trained_model else FRONT_COLUMNS
    return tuple(c for c in columns if c.brief or not brief)


def shown_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    """``metrics`` with the derived ``accuracy_gap`` (validation minus test) where both are."""
    shown = dict(metrics)
    if "accuracy" in metrics and "test_accuracy" in metrics:
        shown["accuracy_gap"] = metrics["accuracy"] - metrics["test_accuracy"]
    return shown
