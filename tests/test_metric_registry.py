"""A metric is one registry entry: once registered, a trial records it, a spec searches it, and
the CLI's table and the report show it (tests/rest/test_api_metric_registry.py: the API)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import optuna
import pytest
from rich.console import Console

from automl import metrics as registry
from automl.fleet.study_loop import run_study_loop
from automl.metrics import Metric, latency_quantile, register
from automl.pipeline.latency import LatencyBudget, latency_stats
from automl.records import METRICS, RECORDED_METRICS, TrialRecord
from automl.report.html import render_report_html
from automl.report.tables import front_table
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.service.read import pareto_front
from automl.trials.trial import latency_budgets

if TYPE_CHECKING:
    from collections.abc import Iterator

P75 = "latency_p75_ms"


@pytest.fixture
def p75() -> Iterator[Metric]:
    """A throwaway latency quantile, registered for one test only."""
    metric = register(latency_quantile(0.75))
    yield metric
    registry._METRICS.pop(metric.name)  # forgotten after it, as scratch_catalog does


def _printed(table: object) -> str:
    console = Console(file=io.StringIO(), width=400, record=True, color_system=None)
    console.print(table)
    return console.export_text()


def test_an_entry_is_named_by_its_quantile_and_refused_twice(p75: Metric) -> None:
    assert (p75.name, p75.label, p75.unit, p75.direction) == (P75, "p75 ms", "ms", "minimize")
    assert P75 in METRICS and P75 in RECORDED_METRICS
    assert latency_stats([1.0, 2.0, 3.0, 4.0, 5.0], 1).metrics[P75] == 4.0
    with pytest.raises(ValueError, match="registered already"):
        register(latency_quantile(0.75))
    with pytest.raises(ValueError, match="a quantile is a latency metric's"):
        Metric("size_p75", "minimize", "model", "size", quantile=0.75)


def test_a_registered_latency_quantile_is_recorded_searched_and_shown(p75, env) -> None:
    settings, storage, store = env
    spec = parse_spec({
        "name": "p75", "search_space": "digits-mlp", "n_trials": 1,
        "objectives": ["accuracy", P75], "constraints": [f"{P75} <= 1000"],
    })  # fmt: skip
    assert [o.direction for o in spec.objectives] == ["maximize", "minimize"]
    assert latency_budgets(spec.constraints, batch_size=8) == [LatencyBudget(1000.0, 0.75)]
    study = create_study(spec, storage)
    study.enqueue_trial({"arch.width": 16, "arch.depth": 1, "pruning_ratio": 0.0, "bits": 32,
                         "batch_size": 8})  # fmt: skip

    run_study_loop("p75", storage, artifact_store=store, settings=settings)

    (trial,) = optuna.load_study(study_name="p75", storage=storage).trials
    attrs = trial.user_attrs
    assert trial.state.name == "COMPLETE" and attrs["feasible"]
    assert attrs["latency_p50_ms"] <= attrs[P75] <= attrs["latency_p90_ms"]
    assert trial.values == [attrs["accuracy"], attrs[P75]]
    (record,) = pareto_front("p75", storage)
    assert record.metrics[P75] == attrs[P75]
    shown = f"{attrs[P75]:.4g}"
    table = _printed(front_table([record], spec))
    assert "p75 ms" in table and shown in table
    page = render_report_html("p75", storage)
    assert "<th>p75 ms</th>" in page and f'<td class="num">{shown}</td>' in page


def test_a_trial_recorded_before_a_metric_existed_is_read_and_shown_without_it(p75) -> None:
    spec = parse_spec({"search_space": "digits-mlp"})
    recorded = {"accuracy": 0.9, "test_accuracy": 0.8, "latency_per_sample_ms": 0.5,
                "latency_p50_ms": 1.0, "latency_p99_ms": 2.0, "throughput_sps": 2000.0,
                "size_mb": 0.1, "macs": 1000.0}  # fmt: skip
    old = optuna.trial.create_trial(values=[0.9, 0.5], user_attrs=recorded)

    record = TrialRecord.of(old, ["accuracy", "latency_per_sample_ms"], on_front=True)

    assert record.metrics == recorded
    lines = _printed(front_table([record], spec)).splitlines()
    header = next(line for line in lines if "p75 ms" in line)
    row = next(line for line in lines if "0.9000" in line)
    cells = dict(zip(header.split("┃"), row.split("│"), strict=True))
    shown = {k.strip(): v.strip() for k, v in cells.items()}
    assert (shown["p75 ms"], shown["p50 ms"], shown["p99 ms"]) == ("-", "1", "2")
