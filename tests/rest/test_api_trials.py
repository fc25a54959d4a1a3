from __future__ import annotations

import csv
import io

import optuna
import pytest

pytest_plugins = ["api_fixtures"]


@pytest.fixture
def study_with_trials(submit_spec, api_server, synthetic_trial):
    """A study with 7 COMPLETE synthetic trials and 1 FAIL trial with its reason."""
    name = submit_spec(n_trials=20).json()["name"]
    study = optuna.load_study(study_name=name, storage=api_server.storage)
    study.add_trials([synthetic_trial(i, 0.9 + i / 100, 1.0 + i / 10) for i in range(7)])
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.FAIL, user_attrs={"fail_reason": "TrialFailed: boom"}
        )
    )
    return name


def test_trials_are_paginated_in_number_order(api_client, study_with_trials):
    url = f"/v1/studies/{study_with_trials}/trials"
    pages = [api_client.get(url, params={"offset": o, "limit": 3}).json() for o in (0, 3, 6, 9)]
    assert [p["total"] for p in pages] == [8] * 4
    assert [[t["number"] for t in p["items"]] for p in pages] == [[0, 1, 2], [3, 4, 5], [6, 7], []]


def test_trials_filter_by_state(api_client, study_with_trials):
    url = f"/v1/studies/{study_with_trials}/trials"
    failed = api_client.get(url, params={"state": "FAIL"}).json()
    assert failed["total"] == 1
    assert failed["items"][0]["fail_reason"] == "TrialFailed: boom"
    assert api_client.get(url, params={"state": "COMPLETE"}).json()["total"] == 7
    bad = api_client.get(url, params={"state": "done"})
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["field"] == "state"


def test_trial_detail_has_metrics_timings_and_constraints(api_client, study_with_trials):
    trial = api_client.get(f"/v1/studies/{study_with_trials}/trials/2").json()
    assert trial["values"] == {"accuracy": 0.92, "latency_per_sample_ms": 1.2}
    assert trial["metrics"]["latency_p99_ms"] == 2.4
    assert trial["timings"] == {"train": 1.0, "export": 0.1}
    assert trial["constraints"] == {"latency_p99_ms <= 5": pytest.approx(-2.6)}
    assert trial["params"] == {"arch.width": 48}


def test_each_trial_says_whether_it_is_on_the_front(
    api_client, study_with_trials, api_server, synthetic_trial
):
    study = optuna.load_study(study_name=study_with_trials, storage=api_server.storage)
    study.add_trial(synthetic_trial(8, 0.85, 1.5))  # dominated by trial 0
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL))  # reaped
    base = f"/v1/studies/{study_with_trials}"
    front = {t["number"] for t in api_client.get(f"{base}/pareto").json()["trials"]}
    listed = api_client.get(f"{base}/trials").json()["items"]
    assert {t["number"] for t in listed if t["on_front"]} == front == set(range(7))
    assert not any(t["on_front"] for t in listed if t["state"] == "FAIL")
    details = [api_client.get(f"{base}/trials/{t['number']}").json() for t in listed]
    assert [d["on_front"] for d in details] == [t["on_front"] for t in listed]
    assert details[-1]["fail_reason"].startswith("no reason recorded: the worker running it")


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/trials/99", 404, "trial_not_found"),
        ("/trials/99/model", 404, "trial_not_found"),
        ("/trials/1/model", 404, "trial_not_found"),  # synthetic: COMPLETE but no model
        ("/trials/-1", 422, "invalid_request"),
        ("/trials?limit=0", 422, "invalid_request"),
        ("/trials?limit=501", 422, "invalid_request"),
    ],
)
def test_errors_name_what_is_wrong(api_client, study_with_trials, path, status, code):
    response = api_client.get(f"/v1/studies/{study_with_trials}{path}")
    assert response.status_code == status
    assert response.json()["code"] == code
    assert response.json()["message"]


def test_unknown_study_trials_404(api_client):
    response = api_client.get("/v1/studies/nope/trials")
    assert (response.status_code, response.json()["code"]) == (404, "study_not_found")


def test_front_as_csv_and_the_report_as_html(api_client, study_with_trials):
    base = f"/v1/studies/{study_with_trials}"
    front = api_client.get(f"{base}/pareto").json()
    numbers = sorted(t["number"] for t in front["trials"])
    response = api_client.get(f"{base}/pareto", headers={"Accept": "text/csv"})
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert sorted(int(r["number"]) for r in rows) == numbers
    accuracy = {t["number"]: t["metrics"]["accuracy"] for t in front["trials"]}
    for row in rows:
        assert row["model"] == ""  # synthetic trials have no model
        assert float(row["accuracy"]) == accuracy[int(row["number"])]
    report = api_client.get(f"{base}/report")
    assert report.status_code == 200 and report.headers["content-type"].startswith("text/html")
    assert f"automl report: {study_with_trials}" in report.text
    assert api_client.get("/v1/studies/nope/report").status_code == 404


@pytest.mark.parametrize("described", [False, True], ids=["as-stored", "exported"])
def test_a_model_file_replaced_by_a_folder_is_a_404_not_a_500(
    api_client, api_server, submit_spec, synthetic_trial, described
):
    name = submit_spec().json()["name"]
    trial = synthetic_trial(0, 0.9, 1.0)
    artifact = f"folder-{name}"
    attrs = {"artifact_id": artifact, **({"data_description": {}} if described else {})}
    trial.user_attrs.update(attrs)
    optuna.load_study(study_name=name, storage=api_server.storage).add_trial(trial)
    (api_server.settings.artifacts_dir / artifact).mkdir(parents=True)
    response = api_client.get(f"/v1/studies/{name}/trials/0/model")
    assert (response.status_code, response.json()["code"]) == (404, "model_not_found")
    assert response.json()["message"] == "the trial's model file is missing or is not a file"


def test_a_fail_reason_names_no_server_path_anywhere_it_is_served(
    api_client, api_server, submit_spec
):
    name = submit_spec().json()["name"]
    root = api_server.settings.data_root
    reason = f"weights '{root}/models/w.pt' do not fit; log in /tmp/automl-x1/trial.log."
    optuna.load_study(study_name=name, storage=api_server.storage).add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.FAIL, user_attrs={"fail_reason": reason}
        )
    )
    shown = "weights 'models/w.pt' do not fit; log in trial.log."
    base = f"/v1/studies/{name}"
    assert api_client.get(f"{base}/trials").json()["items"][0]["fail_reason"] == shown
    assert api_client.get(f"{base}/trials/0").json()["fail_reason"] == shown
    assert api_client.get(base).json()["failures"][0]["reason"] == shown
    report = api_client.get(f"{base}/report").text
    assert "models/w.pt" in report and str(root) not in report and "automl-x1" not in report
