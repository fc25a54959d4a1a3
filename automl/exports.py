"""Exporting a trial's model: the ONNX file plus a ``model.json`` sidecar to deploy it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from automl.errors import SpecError
from automl.objective import ARTIFACT_ID
from automl.spec import METRICS, Constraint
from automl.studies import TrialNotFound, load, pareto_front

if TYPE_CHECKING:
    from optuna.artifacts import FileSystemArtifactStore
    from optuna.storages import BaseStorage


def choose_trial(name: str, storage: BaseStorage, metric: str, budget: str | None = None) -> int:
    """Pick the Pareto trial best on ``metric``, optionally under a budget.

    Args:
        name: The study.
        storage: Its storage.
        metric: The metric to optimise, in its natural direction (e.g. ``accuracy``).
        budget: A constraint such as ``latency_p99_ms <= 2``.

    Returns:
        The chosen trial number.

    Raises:
        SpecError: Unknown metric or malformed budget.
        TrialNotFound: No front trial meets the budget.
    """
    if metric not in METRICS:
        raise SpecError(f"unknown metric {metric!r}; allowed: {list(METRICS)}")
    try:
        limit = Constraint.model_validate(budget) if budget else None
    except ValidationError as e:
        message = e.errors()[0]["msg"].removeprefix("Value error, ")
        raise SpecError(f"invalid budget: {message}") from None
    front = [
        t
        for t in pareto_front(name, storage)
        if limit is None or limit.violation(t["metrics"]) <= 0
    ]
    if not front:
        raise TrialNotFound(f"no Pareto trial of {name!r} meets {budget!r}")
    sign = 1 if METRICS[metric] == "maximize" else -1
    return max(front, key=lambda t: sign * t["metrics"][metric])["number"]


def export_model(
    name: str,
    storage: BaseStorage,
    artifact_store: FileSystemArtifactStore,
    number: int,
    out: Path | str,
) -> dict:
    """Write trial ``number``'s ONNX model to ``out`` and its sidecar beside it.

    The sidecar (``model.json`` for ``model.onnx``) holds params, metrics, target, the
    environment fingerprint, input/output names and shapes, and the preprocessing.

    Returns:
        The sidecar's content.

    Raises:
        TrialNotFound: No such trial, or it has no model (it did not complete).
    """
    import onnx
    from optuna.artifacts import download_artifact

    study, spec = load(name, storage)
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    trial = trials.get(number)
    if trial is None or ARTIFACT_ID not in trial.user_attrs:
        raise TrialNotFound(f"study {name!r} has no completed trial {number} with a model")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    download_artifact(
        artifact_store=artifact_store, file_path=str(out), artifact_id=trial.user_attrs[ARTIFACT_ID]
    )
    graph = onnx.load(str(out)).graph
    sidecar = {
        "study": name,
        "trial": number,
        "target": spec.target,
        "dataset": spec.dataset,
        "params": trial.params,
        "candidate": trial.user_attrs.get("candidate"),
        "metrics": {k: trial.user_attrs[k] for k in METRICS if k in trial.user_attrs},
        "latency": trial.user_attrs.get("latency"),
        "env": trial.user_attrs.get("env"),
        "inputs": [_io(v) for v in graph.input],
        "outputs": [_io(v) for v in graph.output],
        "preprocessing": trial.user_attrs.get("preprocessing"),
    }
    out.with_suffix(".json").write_text(json.dumps(sidecar, indent=2))
    return sidecar


def _io(value) -> dict:
    from onnx import helper

    tensor = value.type.tensor_type
    shape = [d.dim_param or d.dim_value for d in tensor.shape.dim]
    return {
        "name": value.name,
        "dtype": helper.tensor_dtype_to_np_dtype(tensor.elem_type).name,
        "shape": shape,
    }
