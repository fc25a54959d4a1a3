"""The trial-record vocabulary: the metrics, the attr keys a trial is written with, the typed
record every reader takes, and the columns every view shows.

A leaf: the objective writes these, and the service, the fleet, the API and the report read
them, without importing the objective. A trial's attrs are read in one place,
:meth:`TrialRecord.of`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, get_args

from optuna.study._constrained_optimization import _CONSTRAINTS_KEY

from automl.candidate import Built, describe, method_of

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

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


# metric → natural direction; every trial records all of them as user attrs.
METRICS: dict[str, Literal["maximize", "minimize"]] = {
    "accuracy": "maximize",
    "latency_p50_ms": "minimize",
    "latency_p90_ms": "minimize",
    "latency_p99_ms": "minimize",
    "latency_per_sample_ms": "minimize",
    "throughput_sps": "maximize",
    "size_mb": "minimize",
    "params": "minimize",
    "macs": "minimize",
}
# Metrics against the measured baseline: only a study of a trained model (``model:``) has them.
# ``speedup`` is the baseline's per-sample latency at its own serving batch over the trial's
# (what a switch from today's deployment gains); ``speedup_same_batch`` compares both at the
# trial's batch (what the model's changes alone gain).
BASELINE_METRICS: dict[str, Literal["maximize", "minimize"]] = {
    "speedup": "maximize",
    "speedup_same_batch": "maximize",
    "accuracy_drop": "minimize",
    "size_ratio": "minimize",
}
METRICS.update(BASELINE_METRICS)
# Metrics under load: only a study with a serving scenario (``serving:``) has them.
# ``serving_p99_ms`` is the p99 latency, from arrival to result, at the scenario's rate (at the
# max rate found where that rate is ``max``); ``max_rate_rps`` the highest Poisson rate whose
# p99 stays within the scenario's SLO.
SERVING_METRICS: dict[str, Literal["maximize", "minimize"]] = {
    "serving_p99_ms": "minimize",
    "max_rate_rps": "maximize",
}
METRICS.update(SERVING_METRICS)
# Recorded for every trial and shown in every view, but never an objective or constraint: the
# accuracy on the held-out test split. The search sees ``accuracy``, on the validation split.
TEST_METRIC = "test_accuracy"
# The metrics of a model that its deployment (method, batch) does not repair: a constraint on
# one that a model breaks stays broken at every deployment (quantization only lowers accuracy).
MODEL_METRICS = frozenset({"accuracy", TEST_METRIC, "accuracy_drop"})
# Recorded by every quantized trial, never an objective (an fp32 trial has none): its own fp32
# graph's per-sample latency, measured beside it, over its own. At most 1: int8 did not pay.
QUANTIZATION_GAIN = "quantization_gain"
RECORDED_METRICS = (*METRICS, TEST_METRIC, QUANTIZATION_GAIN)
# Metrics that are a timing or a ratio of timings: two trials whose values differ by less than
# their measurements' noise are tied on them (see :func:`automl.service.read.front_records`).
TIMED_METRICS = frozenset({
    "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "latency_per_sample_ms",
    "throughput_sps", "speedup", "speedup_same_batch",
})  # fmt: skip
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
    Column(QUANTIZATION_GAIN, "gain over fp32", "{:.2f}×", "×", brief=False),
    Column("macs", "MACs", "{:,.0f}"),
)
# Against the baseline, in a trained model's study: shown before the others. ``speedup``
# includes what serving at another batch gains; the model's own speedup is beside it.
BASELINE_COLUMNS = (
    Column("speedup", "speedup with batching", "{:.2f}×", "×"),
    Column("speedup_same_batch", "speedup at same batch", "{:.2f}×", "×"),
    Column("accuracy_drop", "acc drop", "{:+.4f}"),
    Column("size_ratio", "size ratio", "{:.3f}", brief=False),
)


# Under load, in a study with a serving scenario: shown after the accuracies.
SERVING_COLUMNS = (
    Column("max_rate_rps", "max req/s", "{:,.0f}", "req/s"),
    Column("serving_p99_ms", "p99 served ms", "{:.4g}", "ms"),
)


def front_columns(spec: Any, *, brief: bool = False) -> tuple[Column, ...]:
    """The columns of a study's front, from its spec (a ``StudySpec``): a trained model's study
    (``spec.model``) leads with its baseline's, and a serving study (``spec.serving``) shows its
    load figures after the accuracies.

    ``brief`` keeps those that a terminal's table shows (:attr:`Column.brief`).
    """
    columns = FRONT_COLUMNS
    if spec.serving is not None:
        columns = (*columns[:3], *SERVING_COLUMNS, *columns[3:])
    if spec.model is not None:
        columns = (*BASELINE_COLUMNS, *columns)
    return tuple(c for c in columns if c.brief or not brief)


def shown_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    """``metrics`` with the derived ``accuracy_gap`` (validation minus test) where both are."""
    shown = dict(metrics)
    if "accuracy" in metrics and "test_accuracy" in metrics:
        shown["accuracy_gap"] = metrics["accuracy"] - metrics["test_accuracy"]
    return shown
