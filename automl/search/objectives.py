"""The objectives and constraints of a study: which metrics it optimises, and its budgets."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from automl.records import METRICS, TEST_METRIC
from automl.search.numbers import numbers_not_text

if TYPE_CHECKING:
    from pydantic import GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import CoreSchema

# Linear for the sampler: accuracy_drop may be negative, and accuracies are bounded.
_LINEAR_METRICS = ("accuracy", "accuracy_drop")
_CONSTRAINT = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=)\s*([-+0-9.eE]+)\s*$")


class Objective(BaseModel):
    """One objective, or just its metric's name; the direction defaults to the metric's natural
    one.

    ``scale: log`` (the default for every metric but accuracy) hands the sampler log10 of the
    metric (see :class:`automl.search.samplers.ScaledValuesSampler`). The front is the same either way,
    but latencies spanning orders of magnitude are then weighed by ratio rather than by absolute
    difference. Optuna stores the raw metric as the objective value.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    metric: str = Field(json_schema_extra={"enum": list(METRICS)})
    direction: Literal["maximize", "minimize"] | None = None
    scale: Literal["linear", "log"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: object) -> object:
        """A bare metric name, ``accuracy``, is ``{metric: accuracy}``."""
        return {"metric": data} if isinstance(data, str) else data

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The object, or just its metric's name (what :meth:`_named` takes)."""
        named = {"type": "string", "enum": list(METRICS), "description": "A metric's name."}
        return {"anyOf": [handler(core_schema), named]}

    @field_validator("metric")
    @classmethod
    def _known(cls, metric: str) -> str:
        return check_metric(metric)

    @model_validator(mode="after")
    def _defaults(self) -> Objective:
        if self.direction is None:
            object.__setattr__(self, "direction", METRICS[self.metric])
        if self.scale is None:
            scale = "linear" if self.metric in _LINEAR_METRICS else "log"
            object.__setattr__(self, "scale", scale)
        return self

    def value(self, metrics: dict[str, float]) -> float:
        """The objective value Optuna stores for these metrics: the raw metric."""
        return metrics[self.metric]

    def scaled(self, value: float) -> float:
        """What the sampler sees of a stored ``value``: log10 of it with ``scale: log``."""
        return math.log10(max(value, 1e-12)) if self.scale == "log" else value


class Constraint(BaseModel):
    """``metric <= bound`` or ``metric >= bound``; Optuna feasibility is ``value <= 0``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    metric: str = Field(json_schema_extra={"enum": list(METRICS)})
    op: Literal["<=", ">="]
    bound: float = Field(allow_inf_nan=False)
    _real = numbers_not_text("bound", whole=False)

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        match = _CONSTRAINT.match(value)
        if not match:
            raise ValueError(f"constraint {value!r} must look like 'latency_p99_ms <= 2'")
        return {"metric": match[1], "op": match[2], "bound": float(match[3])}

    @model_validator(mode="after")
    def _possible(self) -> Constraint:
        check_metric(self.metric)
        low, high = _RANGES.get(self.metric, (0.0, float("inf")))
        if (self.op == "<=" and self.bound <= low) or (self.op == ">=" and self.bound > high):
            raise ValueError(
                f"constraint '{self}' can never hold: {self.metric} lies in [{low}, {high}]"
            )
        return self

    def violation(self, metrics: dict[str, float]) -> float:
        """Optuna constraint value: how far ``metrics`` are from feasibility (≤ 0 is feasible)."""
        value = metrics[self.metric]
        return value - self.bound if self.op == "<=" else self.bound - value

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}"


_RANGES = {"accuracy": (0.0, 1.0), "accuracy_drop": (-1.0, 1.0)}


def check_metric(metric: str) -> str:
    """Return ``metric`` if the search may use it (objective, constraint, ``--best``).

    Raises:
        ValueError: It is unknown, or it is the test split's accuracy.
    """
    if metric == TEST_METRIC:
        raise ValueError(
            f"{TEST_METRIC} is the held-out test split's accuracy: it is reported, never "
            "searched on, or the front's accuracies would be optimistic; use accuracy "
            "(the validation split)"
        )
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; allowed: {list(METRICS)}")
    return metric
