"""Response bodies. Request bodies reuse ``automl.search.spec.StudySpec``, exactly as the CLI does."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from api.errors import scrub_paths
from api.policy import public_spec
from automl.records import TrialRecord, TrialStateName, front_columns
from automl.search.spec import StudySpec
from automl.service.read import waiting_reason
from automl.service.studies import StudyInfo

if TYPE_CHECKING:
    from pathlib import Path

    from automl.service.read import Front
    from automl.settings import Settings
    from automl.targets import Target

Scalar = int | float | str | bool | None
StudyState = Literal["queued", "running", "done", "stopped", "failed"]


class FieldError(BaseModel):
    """One bad input."""

    field: str
    message: str
    in_: str | None = Field(default=None, alias="in")


class ErrorOut(BaseModel):
    """Every error response."""

    code: str = Field(examples=["study_not_found"])
    message: str
    errors: list[FieldError] | None = None


class FailureOut(BaseModel):
    """A failed trial and why."""

    number: int
    reason: str
    params: dict[str, Scalar]
    retried_as: int | None = Field(
        None, description="The trial that re-ran these params after a lost worker, if any."
    )


class StudyOut(BaseModel):
    """A study: spec, state, progress, why it waits when queued, why it failed when it
    failed before any trial (``error``), and why a serving study ended before ``n_trials``
    (``converged``)."""

    name: str
    spec: StudySpec
    state: StudyState
    counts: dict[str, int]
    n_trials: int | None
    created_at: str | None
    eta_s: float | None
    waiting_reason: str | None
    error: str | None = None
    converged: str | None = None
    stale: list[int] = Field(
        default=[], description="RUNNING trials whose worker sends no heartbeat: it has died."
    )
    infeasible: dict[str, int] = {}
    failures: list[FailureOut]
    links: dict[str, str]

    @classmethod
    def of(cls, info: StudyInfo, settings: Settings, serving: frozenset[str]) -> StudyOut:
        """From the study service's record; the dataset as the client gave it, and the reasons
        recorded by workers without the server's paths (see :func:`api.errors.scrub_paths`).

        ``serving``: the targets live workers serve, for ``waiting_reason``.
        """
        base = f"/v1/studies/{info.name}"
        links = {"self": base, "trials": f"{base}/trials", "pareto": f"{base}/pareto"}
        root = settings.data_root
        reasons = {
            "error": info.error and scrub_paths(info.error, root),
            "converged": info.converged and scrub_paths(info.converged, root),
            "failures": [{**f, "reason": scrub_paths(f["reason"], root)} for f in info.failures],
        }
        return cls.model_validate(
            {
                **info.as_dict(),
                **reasons,
                "spec": public_spec(info.spec, settings),
                "waiting_reason": waiting_reason(info, serving),
                "links": links,
            }
        )


class StudyPage(BaseModel):
    """A page of studies."""

    items: list[StudyOut]
    total: int
    offset: int
    limit: int


class TrialOut(BaseModel):
    """A trial: objective values by metric name, params, metrics and a link to its model."""

    number: int
    state: TrialStateName
    values: dict[str, float]
    params: dict[str, Scalar]
    metrics: dict[str, float]
    feasible: bool | None
    fail_reason: str | None
    model_url: str | None
    baseline: bool = Field(
        default=False, description="The unmodified trained model (a trained model's study)"
    )
    on_front: bool = Field(
        default=False,
        description="On the study's Pareto front: feasible and non-dominated, latencies within "
        "their measurements' noise counting as equal",
    )
    label: str = Field(
        default="", description="The deployment as built: widths kept by pruning, method deployed"
    )
    method: str | None = Field(
        default=None,
        description="The quantization method of the deployed graph: fp32 where a per-layer "
        "method kept every layer",
    )
    ties: list[int] = Field(
        default_factory=list,
        description="Trials of Optuna's front that this one ties on latency within noise and "
        "beats on another objective, left out of the front for it",
    )

    @classmethod
    def of(cls, study: str, record: TrialRecord, data_root: Path | None = None) -> TrialOut:
        """From a :class:`automl.records.TrialRecord`; its ``fail_reason`` without the server's
        paths (see :func:`api.errors.scrub_paths`)."""
        url = f"/v1/studies/{study}/trials/{record['number']}/model"
        reason = record.get("fail_reason")
        return cls.model_validate({
            **record,
            "fail_reason": reason and scrub_paths(reason, data_root),
            "model_url": url if record["artifact_id"] else None,
        })  # fmt: skip


class TrialDetail(TrialOut):
    """A trial with everything recorded: stage timings, latency statistics, environment."""

    timings: dict[str, float] | None
    latency: dict[str, Any] | None
    latency_source: str | None
    candidate: dict[str, Any] | None
    env: dict[str, Any] | None
    preprocessing: dict[str, Any] | None
    quantization: dict[str, Any] | None = Field(
        default=None,
        description="a quantized trial's gain over its own fp32 graph, its per-operator times "
        "(ms per run) and, where the gain is at most 1, why",
    )
    constraints: dict[str, float]
    datetime_start: datetime | None
    datetime_complete: datetime | None
    duration_s: float | None


class TrialPage(BaseModel):
    """A page of trials."""

    items: list[TrialOut]
    total: int
    offset: int
    limit: int


class ObjectiveOut(BaseModel):
    """One objective of the front."""

    metric: str
    direction: Literal["maximize", "minimize"]


class ColumnOut(BaseModel):
    """A metric as the CLI and the report show it: the same labels, units and order."""

    key: str = Field(description="the metric's name in each trial's metrics")
    label: str
    unit: str


class ParetoOut(BaseModel):
    """The non-dominated feasible trials of a study."""

    study: str
    objectives: list[ObjectiveOut]
    columns: list[ColumnOut] = Field(description="the front's columns, as the report shows them")
    trials: list[TrialOut]

    @classmethod
    def of(cls, study: str, front: Front) -> ParetoOut:
        """From the study snapshots' front."""
        return cls(
            study=study,
            objectives=[
                ObjectiveOut(metric=o.metric, direction=o.direction) for o in front.spec.objectives
            ],
            columns=[
                ColumnOut(key=c.key, label=c.label, unit=c.unit) for c in front_columns(front.spec)
            ],
            trials=[TrialOut.of(study, record) for record in front.trials],
        )


class TargetOut(BaseModel):
    """A hardware target and whether this server's machine has it."""

    name: str
    kind: Literal["cpu", "cuda"]
    description: str
    execution_providers: list[str]
    backends: list[str] = Field(description="runtimes, in order of preference")
    methods: list[str] = Field(description="quantization methods, each on its first backend")
    precisions: list[int]
    present: bool

    @classmethod
    def of(cls, target: Target, *, present: bool) -> TargetOut:
        """From the target registry's record."""
        return cls(
            name=target.name,
            kind=target.kind,
            description=target.description,
            execution_providers=list(target.execution_providers),
            backends=list(target.backends),
            methods=list(target.methods),
            precisions=list(target.precisions),
            present=present,
        )


class SearchSpaceOut(BaseModel):
    """A registered search space and its parameters."""

    name: str
    description: str
    params: dict[str, dict[str, Any]]


class FileOut(BaseModel):
    """A file stored under the data root, for a spec to name."""

    name: str = Field(description="The file's name under the data root, as a spec names it")
    kind: Literal["dataset", "weights"]
    field: Literal["dataset", "model.weights"] = Field(
        description="The spec field that names this file"
    )
    size_bytes: int
    sha256: str


class HealthOut(BaseModel):
    """Liveness, storage reachability, and the live local workers of ``automl serve``."""

    status: Literal["ok"]
    storage: Literal["ok"]
    workers: int | None = Field(
        default=None,
        description="Live local worker processes (null where this server runs none).",
    )
