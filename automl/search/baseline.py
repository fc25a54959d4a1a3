"""The baseline of a trained model's study: the unmodified model, as one point of its space.

The baseline is the study's first trial, enqueued with these params: no pruning, fp32, ONNX
Runtime's default graph optimisation (``all``), at the serving batch the user runs today
(``model.batch_size``, by default the space's smallest).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from automl.errors import SpecError
from automl.search.params import FixedParam, FloatParam, IntParam, applies, param_values

if TYPE_CHECKING:
    from automl.search.params import Param
    from automl.search.space import SearchSpace
    from automl.search.spec import StudySpec

# What makes a trial the unmodified model: the knob → its baseline value.
_UNMODIFIED = {"pruning_ratio": 0.0, "method": "fp32", "bits": 32, "graph_optimization": "all"}


def baseline_batch(spec: StudySpec, space: SearchSpace) -> int:
    """The baseline's serving batch: the spec's, else the smallest the space offers."""
    if spec.model is not None and spec.model.batch_size is not None:
        return spec.model.batch_size
    return int(min(space.values_of("batch_size"), default=1))


def baseline_params(spec: StudySpec, space: SearchSpace) -> dict[str, Any]:
    """The params, by Optuna name, of the baseline trial of ``spec``'s study.

    Raises:
        SpecError: The space cannot express the unmodified model (no pruning ratio 0, no fp32)
            or the baseline's batch size.
    """
    wanted = {**_UNMODIFIED, "batch_size": baseline_batch(spec, space)}
    chosen: dict[str, Any] = {}
    for name, param in space.params.items():
        if not applies(param, chosen):
            continue
        key = param.sets or name
        if key in wanted:
            if not _contains(param, wanted[key]):
                raise SpecError(
                    f"search space {space.name!r} cannot express the baseline: {name} must "
                    f"allow {wanted[key]!r} (the unmodified model at its serving batch)"
                )
            chosen[name] = wanted[key]
        else:
            chosen[name] = param_values(param)[0]
    return {n: v for n, v in chosen.items() if not isinstance(space.params[n], FixedParam)}


def _contains(param: Param, value: Any) -> bool:
    if isinstance(param, IntParam | FloatParam):
        return param.low <= value <= param.high
    return value in param_values(param)
