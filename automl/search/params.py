"""The parameters of a search space: their kinds, their values, and how a trial draws them."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    import optuna

Scalar = int | float | str


class _Param(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    sets: str | None = None  # the candidate key; defaults to the parameter's own name
    when: dict[str, list[Scalar]] | None = None  # suggested only if earlier params match


class IntParam(_Param):
    type: Literal["int"]
    low: int
    high: int
    step: int = 1
    log: bool = False

    @model_validator(mode="after")
    def _range(self) -> IntParam:
        if self.low > self.high:
            raise ValueError(f"empty range: low {self.low} > high {self.high}")
        return self


class FloatParam(_Param):
    type: Literal["float"]
    low: float
    high: float
    step: float | None = None
    log: bool = False

    @model_validator(mode="after")
    def _range(self) -> FloatParam:
        if self.low > self.high:
            raise ValueError(f"empty range: low {self.low} > high {self.high}")
        if self.log and self.low <= 0:
            raise ValueError("a log range needs low > 0")
        return self


class CategoricalParam(_Param):
    type: Literal["categorical"]
    choices: list[Scalar] = Field(min_length=1)


class FixedParam(_Param):
    type: Literal["fixed"]
    value: Scalar


Param = Annotated[
    IntParam | FloatParam | CategoricalParam | FixedParam, Field(discriminator="type")
]


def applies(param: Param, chosen: dict[str, Any]) -> bool:
    """Whether ``param``'s ``when`` holds for the params ``chosen`` so far."""
    return not param.when or all(chosen.get(k) in v for k, v in param.when.items())


def param_values(param: Param) -> Sequence[Scalar]:
    """The values a param takes (a float param: its ends); an int range is not built."""
    if isinstance(param, CategoricalParam):
        return param.choices
    if isinstance(param, FixedParam):
        return [param.value]
    if isinstance(param, IntParam):
        return range(param.low, param.high + 1, param.step)
    return [param.low, param.high]


def capped(param: Param, most: int) -> Param | None:
    """``param`` without its values above ``most`` (an int range ends at its last step below);
    None where it has none left."""
    values = [v for v in param_values(param) if v <= most]
    if not values:
        return None
    if isinstance(param, IntParam):
        return param.model_copy(update={"high": max(values)})
    if isinstance(param, CategoricalParam):
        return param.model_copy(update={"choices": values})
    return param


def draw_value(param: Param, rng: np.random.Generator) -> Scalar:
    """A value of ``param`` drawn at random (uniform; log-uniform on a log scale)."""
    if isinstance(param, CategoricalParam | FixedParam):
        values = param_values(param)
        return values[int(rng.integers(len(values)))]
    if param.log:
        value = math.exp(rng.uniform(math.log(param.low), math.log(param.high)))
        return round(value) if isinstance(param, IntParam) else value
    if isinstance(param, IntParam):
        return int(rng.choice(param_values(param)))
    if param.step is not None:  # one of the range's steps, clipped as Optuna clips them
        steps = round((param.high - param.low) / param.step)
        return min(param.low + param.step * int(rng.integers(steps + 1)), param.high)
    return float(rng.uniform(param.low, param.high))


def check_bounds(name: str, param: Param) -> None:
    """Refuse a knob whose values leave the bounds in the settings (e.g. a width of 10**9)."""
    from automl.settings import get_settings

    key = param.sets or name
    bound = get_settings().knob_bounds.get(key)
    if bound is None:
        return
    values = param_values(param)
    if isinstance(param, IntParam | FloatParam):
        low, high = param.low, param.high
    elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        low, high = min(values), max(values)
    else:
        return  # a non-numeric value: building the candidate names the problem
    if low < bound[0] or high > bound[1]:
        raise ValueError(
            f"parameter {name!r} reaches {key} {low:g}..{high:g}, outside the allowed "
            f"{bound[0]:g}..{bound[1]:g} (AUTOML_KNOB_BOUNDS)"
        )


def suggest_value(trial: optuna.Trial, name: str, param: Param) -> Any:
    """``param``'s value for ``trial``, suggested under ``name``."""
    if isinstance(param, IntParam):
        return trial.suggest_int(name, param.low, param.high, step=param.step, log=param.log)
    if isinstance(param, FloatParam):
        return trial.suggest_float(name, param.low, param.high, step=param.step, log=param.log)
    if isinstance(param, CategoricalParam):
        return trial.suggest_categorical(name, param.choices)
    return param.value
