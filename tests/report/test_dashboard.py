"""The real optuna-dashboard, served by ``run_dashboard`` on a study run by the real CLI."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import onnx
import pytest
from conftest import FEASIBLE_AND_INFEASIBLE, SIZE_BUDGET, run_cli_study

from automl.records import BASELINE_METRICS, METRICS, SERVING_METRICS
from automl.report.dashboard import exposure_warning, is_loopback

# Its module fixtures run studies: one process runs all its tests, so they run once.
pytestmark = pytest.mark.xdist_group("test_dashboard")

NAME = "dash"
SPEC = {
    "name": NAME,
    "search_space": "digits-mlp",
    "n_trials": 2,
    "constraints": SIZE_BUDGET,
}
RECORDED = {
    *(set(METRICS) - set(BASELINE_METRICS) - set(SERVING_METRICS)),
    "timings",
    "latency",
    "latency_source",
    "env",
    "candidate",
    "artifact_id",
}


@pytest.fixture(scope="module")
def study_run(tmp_path_factory: pytest.TempPathFactory, zygote) -> dict:
    root = tmp_path_factory.mktemp("dashboard")
    return run_cli_study(root, SPEC, FEASIBLE_AND_INFEASIBLE, zygote)


@pytest.fixture(scope="module")
def dashboard(study_run: dict, zygote) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = study_run["env"]
    code = (
        "import sys; from automl.report.dashboard import run_dashboard; "
        "run_dashboard(sys.argv[1], sys.argv[2], '127.0.0.1', int(sys.argv[3]))"
    )
    args = [env["AUTOML_STORAGE"], env["AUTOML_ARTIFACTS_DIR"], str(port)]
    proc = zygote.popen_python(  # forked: its SIGTERM below is passed on
        ["-c", code, *args],
        cwd=study_run["root"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _wait_until_up(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the dashboard exited"
        try:
            if httpx.get(f"{url}/api/meta", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("the dashboard did not answer within 30 s")


@pytest.fixture(scope="module")
def detail(dashboard: str) -> tuple[int, dict]:
    summaries = httpx.get(f"{dashboard}/api/studies").json()["study_summaries"]
    (study,) = [s for s in summaries if s["study_name"] == NAME]
    response = httpx.get(f"{dashboard}/api/studies/{study['study_id']}")
    assert response.status_code == 200
    return study["study_id"], response.json()


def test_study_and_objective_names(detail: tuple[int, dict]) -> None:
    _, study = detail
    assert study["name"] == NAME
    assert study["objective_names"] == ["accuracy", "latency_per_sample_ms"]
    assert study["directions"] == ["maximize", "minimize"]
    assert {a["key"] for a in study["user_attrs"]} >= {"automl_spec", "target", "constraints"}
    assert len(study["trials"]) == len(FEASIBLE_AND_INFEASIBLE)
    assert study["best_trials"]


def test_user_attrs_of_every_trial(detail: tuple[int, dict]) -> None:
    for trial in detail[1]["trials"]:
        assert trial["state"] == "Complete"
        attrs = {a["key"]: a["value"] for a in trial["user_attrs"]}
        assert attrs.keys() >= RECORDED
        assert attrs["latency_source"] == "measured"
        assert float(attrs["latency_p99_ms"]) > 0


def test_feasibility_shows(detail: tuple[int, dict]) -> None:
    """The dashboard reads only the list attr ``constraints``, not Optuna 5's named ones."""
    shown = []
    for trial in detail[1]["trials"]:
        attrs = {a["key"]: a["value"] for a in trial["user_attrs"]}
        assert len(trial["constraints"]) == 2, "the constraint values do not reach the dashboard"
        shown.append(all(v <= 0 for v in trial["constraints"]))
        assert shown[-1] == (attrs["feasible"] == "True")
    assert set(shown) == {True, False}, "the fixture should have feasible and infeasible trials"


def test_best_trials_are_optunas(detail: tuple[int, dict], study_run: dict) -> None:
    """The dashboard's best trials are ``study.best_trials``: an infeasible trial is never best."""
    import optuna
    from optuna.study._multi_objective import _get_pareto_front_trials_by_trials

    study = optuna.load_study(study_name=NAME, storage=study_run["env"]["AUTOML_STORAGE"])
    by_dominance = _get_pareto_front_trials_by_trials(study.trials, study.directions)
    assert any(not t.user_attrs["feasible"] for t in by_dominance), (
        "the fixture should have an infeasible trial that no trial dominates"
    )
    shown = [t["number"] for t in detail[1]["best_trials"]]
    assert shown == sorted(t.number for t in study.best_trials)
    assert shown and len(shown) < len(by_dominance)


def test_artifacts_download(detail: tuple[int, dict], dashboard: str, study_run: dict) -> None:
    study_id, study = detail
    for trial in study["trials"]:
        attrs = {a["key"]: a["value"] for a in trial["user_attrs"]}
        (artifact,) = trial["artifacts"]
        assert artifact["artifact_id"] == attrs["artifact_id"]
        assert artifact["filename"] == "model.onnx"
        url = f"{dashboard}/artifacts/{study_id}/{trial['trial_id']}/{artifact['artifact_id']}"
        response = httpx.get(url)
        assert response.status_code == 200
        stored = Path(study_run["env"]["AUTOML_ARTIFACTS_DIR"]) / artifact["artifact_id"]
        assert response.content == stored.read_bytes()
        assert onnx.load_from_string(response.content).graph.output


def test_frontend_is_served(dashboard: str) -> None:
    response = httpx.get(f"{dashboard}/dashboard")
    assert response.status_code == 200
    assert "<html" in response.text.lower()


@pytest.mark.parametrize(
    ("host", "exposed"),
    [("127.0.0.1", False), ("localhost", False), ("::1", False), ("0.0.0.0", True)],
)
def test_warns_off_loopback(host: str, exposed: bool) -> None:
    assert is_loopback(host) is not exposed
    assert (exposure_warning(host) is not None) is exposed


def test_a_mistyped_storage_is_refused_and_not_created(tmp_path: Path) -> None:
    from automl.errors import StorageUnavailable
    from automl.report.dashboard import run_dashboard

    missing = tmp_path / "typo" / "automl.db"
    raised: list[Exception] = []

    def run() -> None:  # a dashboard that opened the storage would serve forever
        try:
            run_dashboard(f"sqlite:///{missing}", tmp_path / "artifacts", port=0)
        except Exception as e:
            raised.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the dashboard served a storage that did not exist"
    assert isinstance(raised[0], StorageUnavailable) and "does not exist" in str(raised[0])
    assert not missing.parent.exists()
