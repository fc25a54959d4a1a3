"""MLflow tracking: one run per finished trial, on a real MLflow store (the `mlflow` extra)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

import automl
from automl.errors import SpecError
from automl.fleet.tracking import MlflowTracker, tracker
from automl.search.spec import parse_spec

mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed")

SPEC = {"name": "tracked", "search_space": "digits-mlp", "n_trials": 2}


@pytest.fixture(scope="module")
def store_uri(tmp_path_factory) -> str:
    """One SQLite tracking store for the module (creating its tables takes seconds): each
    test logs to an experiment of its own."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def _runs(uri: str, experiment: str) -> dict[str, object]:
    """The experiment's runs by their trial number."""
    client = mlflow.MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no MLflow experiment {experiment!r}"
    runs = client.search_runs([found.experiment_id])
    return {run.data.tags["optuna.trial_number"]: run for run in runs}


@pytest.mark.slow
def test_optimize_logs_one_run_per_trial_with_its_params_and_metrics(
    tmp_path: Path, store_uri: str
) -> None:
    result = automl.optimize(
        **{**SPEC, "name": "optimized"}, storage=f"sqlite:///{tmp_path / 'automl.db'}",
        artifacts_dir=tmp_path / "art", progress=False, remeasure=False, mlflow_uri=store_uri,
    )  # fmt: skip
    trials = result.study.get_trials(deepcopy=False)
    runs = _runs(store_uri, "optimized")  # an experiment of its own in the module's store
    assert sorted(runs) == sorted(str(t.number) for t in trials)
    for trial in trials:
        run = runs[str(trial.number)]
        assert run.info.run_name == f"trial {trial.number}"
        assert run.info.status == "FINISHED"
        assert run.data.params == {k: str(v) for k, v in trial.params.items()}
        for metric in ("accuracy", "test_accuracy", "latency_p99_ms", "size_mb"):
            assert run.data.metrics[metric] == pytest.approx(trial.user_attrs[metric])
        assert run.data.tags["optuna.state"] == "COMPLETE"
        assert run.data.tags["automl.target"] == "cpu"


@pytest.mark.slow
def test_cli_option_logs_the_trials_of_every_job(cli, store_uri: str) -> None:
    cli(
        "study", "start", "--space", "digits-mlp", "--n-trials", "2", "--jobs", "2", "--name",
        "jobs", "--no-remeasure-front", "--mlflow-uri", store_uri,
    )  # fmt: skip
    study = optuna.load_study(study_name="jobs", storage=cli.storage)
    numbers = sorted(str(t.number) for t in study.get_trials(deepcopy=False))
    assert sorted(_runs(store_uri, "jobs")) == numbers


def test_cli_refuses_a_tracking_store_it_cannot_open_before_any_trial(cli) -> None:
    done = cli(
        "study", "start", "--space", "digits-mlp", "--n-trials", "1", "--mlflow-uri",
        "nosuchscheme://x", check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "error: cannot log to MLflow at 'nosuchscheme://x'" in done.stderr
    assert optuna.get_all_study_names(cli.storage) == []  # refused before the study existed


def test_a_tracking_server_that_does_not_answer_is_refused_before_torch_is_imported(cli) -> None:
    # A fresh interpreter, not the zygote (which has torch already): MLflow's own retries took
    # 252 s, and probing only after torch, Optuna and MLflow were imported took 16-27 s.
    with socket.socket() as probe:  # a loopback port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = ["automl", "study", "start", "--space", "digits-mlp", "--n-trials", "1",
            "--mlflow-uri", f"http://127.0.0.1:{port}"]  # fmt: skip
    code = (
        f"import sys, automl.cli\nsys.argv = {argv!r}\n"
        "try:\n    automl.cli.app()\nexcept SystemExit as e:\n    code = e.code\n"
        "print(code, sorted(m for m in ('torch', 'optuna', 'mlflow') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cli.root, env=cli.env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.stdout.strip() == "2 []", done.stdout + done.stderr
    assert done.stderr.startswith(
        f"error: no MLflow tracking server answers at 'http://127.0.0.1:{port}' ("
    ), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not Path(cli.storage.removeprefix("sqlite:///")).exists()  # no storage was opened


def test_a_failed_trial_is_a_failed_run_with_its_reason(store_uri: str) -> None:
    trial = optuna.trial.create_trial(
        state=optuna.trial.TrialState.FAIL,
        params={"arch.width": 16},
        distributions={"arch.width": optuna.distributions.IntDistribution(8, 64)},
        user_attrs={"fail_reason": "TrialFailed: export failed"},
    )
    MlflowTracker(store_uri, parse_spec(SPEC)).log(trial)
    run = _runs(store_uri, "tracked")[str(trial.number)]
    assert run.info.status == "FAILED"
    assert run.data.tags["automl.fail_reason"] == "TrialFailed: export failed"
    assert run.data.params == {"arch.width": "16"}
    assert run.data.metrics == {}


def test_tracking_is_off_without_a_uri() -> None:
    assert tracker(None, parse_spec(SPEC)) == []


def test_a_store_that_cannot_be_opened_is_a_clear_error() -> None:
    with pytest.raises(SpecError, match="cannot log to MLflow at 'nosuchscheme://x'"):
        MlflowTracker("nosuchscheme://x", parse_spec(SPEC))


def test_a_store_failing_mid_study_costs_the_run_not_the_trial(store_uri: str, caplog) -> None:
    logger = MlflowTracker(store_uri, parse_spec({**SPEC, "name": "deleted"}))
    mlflow.MlflowClient(store_uri).delete_experiment(
        logger.experiment_id
    )  # no new run can go there
    trial = optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED)
    with caplog.at_level("WARNING", logger="automl.fleet.tracking"):
        logger(optuna.create_study(), trial)
    assert f"trial {trial.number} was not logged to MLflow" in caplog.text


def test_a_tracking_uri_with_credentials_is_probed_without_them_and_never_shown() -> None:
    import http.server
    import socket
    import threading

    from automl.errors import SpecError
    from automl.fleet.tracking import check_reachable

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.handle_request, daemon=True)
    thread.start()
    check_reachable(f"http://user:secret@127.0.0.1:{server.server_port}")  # any answer counts
    thread.join(5)
    server.server_close()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(SpecError) as refused:
        check_reachable(f"http://user:secret@127.0.0.1:{port}/mlflow")
    assert "secret" not in str(refused.value) and f"'http://127.0.0.1:{port}/mlflow'" in str(
        refused.value
    )
