"""A registered metric through the live API: a submitted spec searches it, and a trial's output
and the front's columns show it (tests/test_metric_registry.py: the trial, the CLI, the report)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import optuna
import pytest

from automl import metrics as registry
from automl.metrics import Metric, latency_quantile, register

if TYPE_CHECKING:
    from collections.abc import Iterator

pytest_plugins = ["api_fixtures"]
P75 = "latency_p75_ms"


@pytest.fixture
def p75() -> Iterator[Metric]:
    """A throwaway latency quantile, registered for one test only."""
    metric = register(latency_quantile(0.75))
    yield metric
    registry._METRICS.pop(metric.name)


def test_a_registered_metric_is_searched_and_shown_by_the_api(
    p75, api_client, api_server, submit_spec
) -> None:
    response = submit_spec(objectives=["accuracy", P75], constraints=[f"{P75} <= 5"])
    assert response.status_code == 201, response.text
    name = response.json()["name"]
    trial = optuna.trial.create_trial(
        values=[0.9, 1.5],
        user_attrs={"accuracy": 0.9, P75: 1.5, "latency_p50_ms": 1.0, "feasible": True},
        constraints={f"{P75} <= 5": -3.5},
    )
    optuna.load_study(study_name=name, storage=api_server.storage).add_trial(trial)

    detail = api_client.get(f"/v1/studies/{name}/trials/0").json()
    front = api_client.get(f"/v1/studies/{name}/pareto").json()

    assert detail["values"] == {"accuracy": 0.9, P75: 1.5}
    assert detail["metrics"] == {"accuracy": 0.9, P75: 1.5, "latency_p50_ms": 1.0}
    assert {"key": P75, "label": "p75 ms", "unit": "ms"} in front["columns"]
    assert front["trials"][0]["metrics"][P75] == 1.5
