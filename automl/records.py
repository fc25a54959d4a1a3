"""The trial-record vocabulary: the metrics, the attr keys a trial is written with, the typed
record every reader takes, and the columns every view shows.

A leaf: the objective writes these, and the service, the fleet, the API and the report read
them, without importing the objective. A trial's attrs are read in one place,
:meth:`TrialRecord.of`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, get_args

from optuna.study._constrained_optimization import _CONSTRAINTS_KEY

from automl.candidate import Built, describe, method_of
from automl.metrics import REGISTRY, Directions, Metric, Names

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    import optuna

TrialStateName = Literal["COMPLETE", "FAIL", "RUNNING", "WAITING", "PRUNED"]
TRIAL_STATES: tuple[str, ...] = get_args(TrialStateName)  # as Optuna's TrialState names them
SPEC_ATTR = "automl_spec"  # the study user attr holding its spec: marks an automl study
FAIL_REASON = "fail_reason"
# The reason of a FAIL trial that recorded none: a reaper failed it.
LOST_WORKER = "no reason recorded: the worker running it stopped (killed, or heartbeat lost)"
OVER_BUDGET = "over_budget"  # a trial that lost the race for the last slot: PRUNED, never run
ARTIFACT_ID = "artifact_id"
WORKER = "worker"  # host:pid of the process that ran the trial
BASELINE = "baseline"  # marks the unmodified trained model's trial (a trained model's study)
SCREENED = "screened"  # why a serving study's trial was pruned before its load search
REPEAT_OF = "repeat_of"  # the trial that measured a screened repeat's deployment
# Study attrs.
STOP_ATTR = "stop_requested"
FORGIVEN_ATTR = "failures_forgiven"
# Why no worker can run the study (e.g. its trained model is refused), set by the worker that
# found it; the study is then failed.
REFUSED_ATTR = "refused"
# Why a serving study ended before n_trials: its last trials were all screened out.
CONVERGED_ATTR = "converged"
# The data root that a REST submission's files must lie under, when its worker reads them too.
DATA_ROOT_ATTR = "data_root"


# The metrics' vocabulary, read from the registry (see :mod:`automl.metrics`) at each use.
# metric → natural direction: what a spec may search (objectives, constraints).
METRICS = Directions()
# Against the measured baseline: only a study of a trained model (``model:``) has them.
BASELINE_METRICS = Directions(lambda m: m.baseline)
# Under load: only a study with a serving scenario (``serving:``) has them.
SERVING_METRICS = Directions(lambda m: m.source == "load")
# Recorded for every trial and shown in every view, but never an objective or constraint: the
# accuracy on the held-out test split. The search sees ``accuracy``, on the validation split.
TEST_METRIC = "test_accuracy"
# The metrics of a model that its deployment (method, batch) does not repair: a constraint on
# one that a model breaks stays broken at every deployment (quantization only lowers accuracy).
MODEL_METRICS = Names(lambda m: m.source == "task")
# Recorded by every quantized trial, never an objective (an fp32 trial has none): its own fp32
# graph's per-sample latency, measured beside it, over its own. At most 1: int8 did not pay.
QUANTIZATION_GAIN = "quantization_gain"
# What a trial's record holds of its attrs: every metric but those the views derive.
RECORDED_METRICS = Names(lambda m: m.source != "derived")
# Metrics that are a timing or a ratio of timings: two trials whose values differ by less than
# their measurements' noise are tied on them (see :func:`automl.service.read.front_records`).
TIMED_METRICS = Names(lambda m: m.source == "latency")
# The key of a trial's ``history`` attr that says what its stages built (see :class:`Built`).
BUILT = "built"


@dataclass(frozen=True)
class TrialRecord:
    """A trial as every view reads it: the CLI, the API, the report, exports and Python.

    It also reads as a mapping of its fields (``record["metrics"]``, ``record.get(...)``,
    ``{**record}``), the form in which ``automl.optimize(...).front`` has always given rows.

    Attributes:
        number: The trial's number in its study.
        state: Optuna's state name (``COMPLETE``, ``FAIL``, ...).
        values: The study's objective metrics, raw (not log-scaled), by name.
        params: The sampled params.
        metrics: Every recorded metric the trial has (see :data:`RECORDED_METRICS`).
        feasible: Whether it met every constraint; ``None`` before it completed.
        artifact_id: Its ONNX model in the artifact store, if it has one.
        fail_reason: Why it failed, for a FAIL trial.
        baseline: Whether it is the unmodified trained model's trial.
        user_attrs: Everything the trial recorded, as stored.
        on_front: Whether it is on its study's Pareto front as automl shows it: feasible and
            non-dominated, where latencies within their measurements' noise are equal.
        label: The deployment as built (see :func:`automl.candidate.describe`).
        method: The quantization method of the deployed graph: ``fp32`` where a per-layer
            method kept every layer; ``None`` before the trial has a candidate.
        ties: Trials of Optuna's front that this one ties on latency within noise while beating
            them on another objective: automl's front leaves them out for this one.
    """

    number: int
    state: str
    values: Mapping[str, float]
    params: Mapping[str, Any]
    metrics: Mapping[str, float]
    feasible: bool | None
    artifact_id: str | None
    fail_reason: str | None
    baseline: bool
    user_attrs: Mapping[str, Any] = field(repr=False)
    on_front: bool = False
    label: str = ""
    method: str | None = None
    ties: tuple[int, ...] = ()

    @classmethod
    def of(
        cls,
        trial: optuna.trial.FrozenTrial,
        objectives: Sequence[str],
        *,
        on_front: bool,
        ties: Sequence[int] = (),
    ) -> TrialRecord:
        """Read ``trial``'s attrs; ``objectives`` names the study's objective metrics. A FAIL
        trial that recorded no reason was failed by a reaper: :data:`LOST_WORKER` says so."""
        attrs = trial.user_attrs
        built = built_of(attrs)
        candidate = attrs.get("candidate")
        return cls(
            number=trial.number,
            state=trial.state.name,
            values={m: attrs[m] for m in objectives if m in attrs},
            params=trial.params,
            metrics={k: attrs[k] for k in RECORDED_METRICS if k in attrs},
            feasible=attrs.get("feasible"),
            artifact_id=attrs.get(ARTIFACT_ID),
            fail_reason=attrs.get(FAIL_REASON, LOST_WORKER if trial.state.name == "FAIL" else None),
            baseline=bool(attrs.get(BASELINE)),
            user_attrs=attrs,
            on_front=on_front,
            label=describe(candidate, built) if candidate else _params_text(trial.params),
            method=built.method if built else None,
            ties=tuple(ties),
        )

    def __getitem__(self, key: str) -> Any:
        if key not in _RECORD_FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in _RECORD_FIELDS

    def keys(self) -> tuple[str, ...]:
        """The field names, as a mapping's keys."""
        return _RECORD_FIELDS

    def get(self, key: str, default: Any = None) -> Any:
        """A field by name, or ``default``."""
        return getattr(self, key) if key in _RECORD_FIELDS else default

    def items(self) -> list[tuple[str, Any]]:
        """``(field, value)`` pairs, as a mapping's items."""
        return [(key, getattr(self, key)) for key in _RECORD_FIELDS]


_RECORD_FIELDS = tuple(f.name for f in fields(TrialRecord))


def built_of(attrs: Mapping[str, Any]) -> Built | None:
    """What a trial built, from its user ``attrs``; ``None`` before it has a candidate.

    A trial recorded before :data:`BUILT` was gets what its attrs still tell: a per-layer
    method whose ``keep_fp32`` covered every layer of its evidence deployed fp32.
    """
    candidate = attrs.get("candidate")
    if candidate is None:
        return None
    history = attrs.get("history") or {}
    recorded = history.get(BUILT) or {}
    method = recorded.get("method") or _method_of_layers(candidate, history.get("layers"))
    pruned = None
    if "params" in attrs and "params_unpruned" in attrs:
        pruned = attrs["params"] < attrs["params_unpruned"]
    return Built(method, tuple(recorded.get("widths") or ()), pruned)


def _method_of_layers(candidate: Mapping[str, Any], layers: Mapping[str, Any] | None) -> str:
    """The asked method, or ``fp32`` where the layers kept in fp32 were every layer."""
    if layers and len(layers.get("kept_fp32", ())) >= len(layers.get("evidence", ())):
        return "fp32"
    return method_of(dict(candidate))


def _params_text(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


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

    @classmethod
    def of(cls, metric: Metric) -> Column:
        """The column of a registered metric."""
        brief = metric.shown == "table"
        return cls(metric.name, metric.label, metric.fmt, metric.unit, brief=brief)


def column_of(name: str) -> Column:
    """The column of the metric ``name``; one labelled with its name where none is registered."""
    metric = REGISTRY.get(name)
    return Column.of(metric) if metric else Column(name, name, "{:.4g}")


class _Columns(Sequence[Column]):
    """The columns of the registered metrics that ``keep`` selects, read at each use."""

    def __init__(self, keep: Callable[[Metric], bool]) -> None:
        self._keep = keep

    def _columns(self) -> tuple[Column, ...]:
        return tuple(Column.of(m) for m in REGISTRY.values() if m.shown and self._keep(m))

    def __getitem__(self, index: Any) -> Any:
        return self._columns()[index]

    def __len__(self) -> int:
        return len(self._columns())


# The columns of every view, in registry order: those against the baseline (a trained model's
# study), those under load (a serving study), and those of every study.
BASELINE_COLUMNS = _Columns(lambda m: m.baseline)
SERVING_COLUMNS = _Columns(lambda m: m.source == "load")
FRONT_COLUMNS = _Columns(lambda m: not m.baseline and m.source != "load")


def front_columns(spec: Any, *, brief: bool = False) -> tuple[Column, ...]:
    """The columns of a study's front, from its spec (a ``StudySpec``), in registry order: a
    trained model's study (``spec.model``) leads with its baseline's, and a serving study
    (``spec.serving``) shows its load figures after the accuracies.

    ``brief`` keeps those that a terminal's table shows (:attr:`Column.brief`).
    """
    return tuple(
        Column.of(m)
        for m in REGISTRY.values()
        if m.shown in (("table",) if brief else ("table", "report"))
        and (spec.model is not None or not m.baseline)
        and (spec.serving is not None or m.source != "load")
    )


def shown_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    """``metrics`` with the derived ``accuracy_gap`` (validation minus test) where both are."""
    shown = dict(metrics)
    if "accuracy" in metrics and "test_accuracy" in metrics:
        shown["accuracy_gap"] = metrics["accuracy"] - metrics["test_accuracy"]
    return shown
