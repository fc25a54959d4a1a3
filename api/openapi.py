"""The OpenAPI document: the registries a spec may name, and what each spec field means.

A spec from the network may name only registered targets and search spaces (see
:mod:`api.policy`), and the registries are fixed while the server runs, so the schema
enumerates them. The spec's models describe some of their fields; :data:`FIELD_DESCRIPTIONS`
describes the others, as a client of this API reads them (a description a model gives wins).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi.openapi.utils import get_openapi

from automl.search.space import list_spaces
from automl.targets import list_targets

if TYPE_CHECKING:
    from fastapi import FastAPI

FIELD_DESCRIPTIONS: dict[str, dict[str, str]] = {
    "StudySpec": {
        "name": "The study's name: 1-100 letters, digits, '_', '.' or '-', starting with a "
        "letter or digit. Left out, the server names it <search_space>-<target>-<suffix>, "
        "which the response's name gives",
        "target": "Where latency is measured: a target of GET /v1/targets",
        "search_space": "What is searched: a space of GET /v1/search-spaces (default "
        "digits-mixed; trained-model with model, onnx-model with an .onnx model)",
        "dataset": "digits (built in), or an .npz file by its path under the server's data root "
        "(AUTOML_DATA_ROOT), such as one stored with PUT /v1/files/{name}",
        "n_trials": "COMPLETE trials to reach, all workers together; at most "
        "AUTOML_MAX_N_TRIALS, which null gets (then set timeout_s)",
        "timeout_s": "Seconds from the study's first trial after which no worker takes another "
        "of its trials; at most AUTOML_MAX_TIMEOUT_S",
        "sampler": "default (Optuna's TPE), tpe (multivariate), nsga2, random or gp",
        "seed": "Seed of the data splits, the training and the sampler",
        "trials_per_model": "Trials per trained model, its deployment variants included (1: a "
        "new model every trial)",
        "variant_startup_trials": "COMPLETE trials before deployment variants are chosen by "
        "prediction",
        "objectives": "The metrics to optimise, as names or {metric, direction, scale}; by "
        "default accuracy and latency_per_sample_ms (accuracy_drop and speedup with model, "
        "max_rate_rps with serving)",
        "constraints": "Budgets, each 'metric <= bound' or 'metric >= bound': a trial that "
        "breaks one is infeasible and never on the front; by default latency_p99_ms <= 5 "
        "([] for none)",
        "model": "A trained model whose deployments are searched, instead of models trained "
        "here: {factory, weights} or {weights} of an .onnx graph, under the data root",
    },
    "TrainedModel": {
        "batch_size": "The baseline's serving batch; by default the space's smallest",
        "expected_accuracy": "The validation accuracy expected of the model: a baseline "
        "clearly below it is warned of",
    },
    "Serving": {
        "arrival": "How requests arrive: as a Poisson process",
        "rate_rps": "The offered rate in requests per second, or max: the highest rate whose "
        "p99 meets slo_p99_ms",
        "slo_p99_ms": "The bound on a request's p99 latency, from arrival to result, in ms",
        "duration_s": "Seconds of each load run",
    },
    "Objective": {
        "metric": "The metric to optimise",
        "direction": "maximize or minimize; by default the metric's natural direction",
        "scale": "log hands the sampler log10 of the metric (the default, but for accuracy "
        "and accuracy_drop), linear the metric itself",
    },
    "Constraint": {
        "metric": "The metric bounded",
        "op": "<= or >=",
        "bound": "The bound a feasible trial's metric meets",
    },
}


def openapi_schema(app: FastAPI) -> dict:
    """``app``'s OpenAPI document, built once: the spec's ``target`` and ``search_space``
    enumerate the registries, and every spec field is described."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        components = schema["components"]["schemas"]
        spec = components["StudySpec"]["properties"]
        spec["target"]["enum"] = [t.name for t in list_targets()]
        spec["search_space"]["enum"] = list_spaces()
        for model, descriptions in FIELD_DESCRIPTIONS.items():
            _describe(_properties(components[model]), descriptions)
        app.openapi_schema = schema
    return app.openapi_schema


def _properties(component: dict) -> dict:
    """A model's properties; an :class:`~automl.search.objectives.Objective` is an object or
    its metric's name, and the object's are described."""
    if "properties" in component:
        return component["properties"]
    [object_form] = [form for form in component["anyOf"] if "properties" in form]
    return object_form["properties"]


def _describe(properties: dict, descriptions: dict[str, str]) -> None:
    for field, description in descriptions.items():
        properties[field].setdefault("description", description)
