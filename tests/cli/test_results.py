"""``automl study trials``: every trial, as a table and as REST's items."""

from __future__ import annotations

import json

import optuna
import pytest
import typer
from rich.console import Console

from api.schemas import TrialOut
from automl.cli.main import app
from automl.cli.results import trials_table
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.service.read import study_trials
from automl.settings import Settings
from automl.storage.factory import open_storage

REASON = "TrialFailed: export: the graph holds an operator that ONNX Runtime cannot run here"


@pytest.fixture
def storage(cli):
    """Study ``t`` in the CLI's storage: two COMPLETE trials (the second dominates the
    first), one FAIL with its reason, one RUNNING."""
    storage = open_storage(cli.storage, Settings(storage=cli.storage))
    spec = parse_spec({"name": "t", "search_space": "digits-mlp", "n_trials": 9})
    study = create_study(spec, storage, check_data=False)
    for number, (accuracy, latency) in enumerate([(0.9, 0.02), (0.95, 0.01)]):
        trial = study.ask()
        trial.suggest_int("arch.width", 16, 128, step=16)
        attrs = {"accuracy": accuracy, "latency_per_sample_ms": latency, "feasible": True}
        for key, value in {**attrs, "artifact_id": f"model-{number}"}.items():
            trial.set_user_attr(key, value)
        study.tell(trial, [accuracy, latency])
    failed = study.ask()
    failed.set_user_attr("fail_reason", REASON)
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    study.ask()
    yield storage
    storage.engine.dispose()


def test_trials_lists_each_trial_with_its_state_metrics_and_reason(cli, storage):
    rows = [line for line in cli("study", "trials", "t").stdout.splitlines() if "│" in line]
    cells = [[cell.strip() for cell in row.split("│")[1:3]] for row in rows]
    assert cells == [["0", "COMPLETE"], ["1*", "COMPLETE"], ["2", "FAIL"], ["3", "RUNNING"]]
    assert "0.9500" in rows[1] and "0.01" in rows[1]
    assert REASON in rows[2]
    missing = cli("study", "trials", "nope", check=False)
    assert missing.returncode == 2 and "no study named 'nope'" in missing.stderr


def test_trials_json_has_the_fields_of_the_rest_items(cli, storage):
    listed = json.loads(cli("study", "trials", "t", "--json").stdout)
    rest_fields = set(TrialOut.model_fields) - {"model_url"}
    assert all(set(item) == rest_fields | {"artifact_id"} for item in listed)
    assert [(t["number"], t["state"], t["on_front"]) for t in listed] == [
        (0, "COMPLETE", False), (1, "COMPLETE", True), (2, "FAIL", False), (3, "RUNNING", False),
    ]  # fmt: skip
    assert listed[2]["fail_reason"] == REASON
    assert listed[1]["values"] == {"accuracy": 0.95, "latency_per_sample_ms": 0.01}
    assert listed[1]["artifact_id"] == "model-1" and set(listed[1]["params"]) == {"arch.width"}


def test_the_trials_table_fits_80_columns(storage):
    spec, records = study_trials("t", storage)
    console = Console(width=80, record=True, color_system=None)
    console.print(trials_table(records, spec))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    table = [line for line in lines if line.startswith(("┃", "│"))]
    assert all(line.endswith(("┃", "│")) for line in table)  # nothing cut at the right edge
    assert " ".join(table).count("ONNX") == 1  # the reason is wrapped, not cut


def test_export_best_says_which_speedup_it_ranks_on():
    export = typer.main.get_command(app).commands["study"].commands["export"]
    (best,) = [p for p in export.params if p.name == "best"]
    assert best.help == (
        "Best Pareto trial on this metric (speedup includes batching; speedup_same_batch is "
        "the model's own)."
    )
