from __future__ import annotations

import os
import time
import warnings
from datetime import datetime, timedelta

import onnxruntime as ort
import optuna
import pytest
from optuna.artifacts import download_artifact
from rich.console import Console

from automl.fleet.scheduler import Scope, runnable_studies
from automl.fleet.study_loop import run_study_loop
from automl.records import FORGIVEN_ATTR
from automl.report.tables import study_panel
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.service.read import list_studies, pareto_front, waiting_reason
from automl.service.studies import StudyNotFound, get_study, request_stop, retry_failed
from automl.settings import Settings
from automl.storage.factory import open_artifact_store, open_storage


def _spec(**values):
    base = {"name": "t", "search_space": "digits-mlp", "n_trials": 3, "seed": 0}
    return parse_spec({**base, **values})


def test_study_runs_records_and_builds_a_front(env, tmp_path):
    settings, storage, store = env
    spec = _spec(constraints=["latency_p99_ms <= 50"])
    create_study(spec, storage)
    result = run_study_loop("t", storage, artifact_store=store, settings=settings)
    assert result.reason == "done" and result.ran == 3

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # plain Optuna loads the study without a warning
        study = optuna.load_study(study_name="t", storage=settings.storage)
        trial = study.trials[0]
        constraints = trial.constraints
    assert study.metric_names == ["accuracy", "latency_per_sample_ms"]
    assert study.user_attrs["target"] == "cpu"
    assert study.user_attrs["automl_spec"]["search_space"] == "digits-mlp"
    for key in (
        "accuracy",
        "test_accuracy",
        "latency_p99_ms",
        "size_mb",
        "macs",
        "timings",
        "env",
        "latency",
    ):
        assert key in trial.user_attrs
    stages = {"train", "prune", "export", "quantize", "evaluate", "latency"}
    quantized = trial.user_attrs["candidate"]["bits"] < 32  # it also times its fp32 graph
    assert set(trial.user_attrs["timings"]) == stages | (
        {"quantization_gain"} if quantized else set()
    )
    assert ("quantization_gain" in trial.user_attrs) == quantized
    assert study.user_attrs["constraints"] == ["latency_p99_ms <= 50"]
    # Raw metrics are stored as the objective values, validation accuracy first.
    assert trial.values == [trial.user_attrs["accuracy"], trial.user_attrs["latency_per_sample_ms"]]
    assert constraints == {"0": trial.system_attrs["constraints"][0]}  # the dashboard's format
    assert constraints["0"] < 0 and "constraints:0" not in trial.system_attrs

    front = pareto_front("t", storage)
    assert front
    for a in front:
        for b in front:
            dominates = (
                b["values"]["accuracy"] >= a["values"]["accuracy"]
                and b["values"]["latency_per_sample_ms"] <= a["values"]["latency_per_sample_ms"]
                and b["values"] != a["values"]
            )
            assert not dominates
    model = tmp_path / "m.onnx"
    download_artifact(
        artifact_store=store, file_path=str(model), artifact_id=front[0]["artifact_id"]
    )
    assert ort.InferenceSession(str(model)).get_inputs()[0].name == "input"

    info = get_study("t", storage)
    assert info.state == "done" and info.counts["COMPLETE"] == 3
    assert [i.name for i in list_studies(storage)] == ["t"]


def test_failed_trial_is_recorded_and_the_study_goes_on(env, tmp_path):
    settings, storage, store = env
    space = tmp_path / "fourbit.yaml"
    space.write_text(
        "name: fourbit\nparams:\n"
        "  arch.family: {type: fixed, value: cnn}\n"
        "  arch.width: {type: categorical, choices: [8, 16]}\n"
        "  arch.depth: {type: fixed, value: 1}\n"
        "  bits: {type: fixed, value: 4}\n"
        "  train.epochs: {type: fixed, value: 2}\n"
    )
    spec = _spec(search_space=str(space), n_trials=1)
    study = create_study(spec, storage)
    study.enqueue_trial({"arch.width": 8})  # a 8-wide head is too narrow for 4-bit MatMulNBits
    study.enqueue_trial({"arch.width": 16})
    run_study_loop("t", storage, artifact_store=store, settings=settings)
    info = get_study("t", storage)
    assert info.counts["FAIL"] == 1 and info.counts["COMPLETE"] == 1
    assert info.failures[0]["reason"].startswith("UnsupportedQuantization: 4-bit")


def test_infeasible_trials_stay_off_the_front(env):
    settings, storage, store = env
    create_study(_spec(n_trials=2, constraints=["accuracy >= 0.9999"]), storage)
    run_study_loop("t", storage, artifact_store=store, settings=settings)
    assert pareto_front("t", storage) == []


def test_stop_request_ends_the_loop_before_any_trial(env):
    settings, storage, store = env
    create_study(_spec(), storage)
    request_stop("t", storage)
    result = run_study_loop("t", storage, artifact_store=store, settings=settings)
    assert result.reason == "stopped" and result.ran == 0
    assert get_study("t", storage).state == "stopped"


def test_a_study_whose_time_budget_has_passed_is_done_not_queued(env):
    settings, storage, store = env
    create_study(_spec(n_trials=5, timeout_s=60), storage)
    study = optuna.load_study(study_name="t", storage=storage)
    trial = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL)
    trial.datetime_start = datetime.now() - timedelta(seconds=30)
    study.add_trial(trial)
    assert get_study("t", storage).state == "queued"  # 30 s of 60 spent: workers go on
    trial.datetime_start = datetime.now() - timedelta(seconds=61)
    study.add_trial(trial)
    info = get_study("t", storage)
    assert info.state == "done"
    assert waiting_reason(info, frozenset({"cpu"})) is None
    assert runnable_studies(storage, Scope()) == []
    result = run_study_loop("t", storage, artifact_store=store, settings=settings)
    assert (result.reason, result.ran) == ("timeout", 0)  # a resumed loop too


def test_show_names_running_trials_whose_worker_sends_no_heartbeat(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    storage = open_storage(url, Settings(storage=url, heartbeat_interval_s=1, grace_period_s=2))
    create_study(_spec(), storage)
    optuna.load_study(study_name="t", storage=storage).ask()  # a worker that then dies
    assert get_study("t", storage).stale == []  # its first heartbeat is fresh
    time.sleep(3.5)
    info = get_study("t", storage)
    assert info.stale == [0]
    console = Console(record=True, width=200)
    console.print(study_panel(info))
    assert "trial 0: its worker sends no heartbeat" in console.export_text()


def test_unknown_study(env):
    with pytest.raises(StudyNotFound, match="no study named 'nope'"):
        get_study("nope", env[1])


def test_remeasure_front_records_new_latencies(env):
    from automl.fleet.remeasure import REMEASURED_ATTR, remeasure_front

    settings, storage, store = env
    create_study(_spec(n_trials=2), storage)
    run_study_loop("t", storage, artifact_store=store, settings=settings)
    front = pareto_front("t", storage)
    results = remeasure_front("t", storage, store)
    assert sorted(results) == sorted(t["number"] for t in front)
    for trial in front:
        again = results[trial["number"]]
        assert again["first_p50_ms"] == trial["metrics"]["latency_p50_ms"]
        assert again["p50_ms"] > 0 and again["runs"] >= 100
        assert trial["user_attrs"]["latency_noisy"] is (
            not trial["user_attrs"]["latency"]["converged"]
        )
    stored = optuna.load_study(study_name="t", storage=settings.storage).user_attrs[REMEASURED_ATTR]
    assert set(stored) == {str(n) for n in results}


def test_optuna_storages_without_our_queries_record_the_same(tmp_path):
    """Optuna's own storages (here in memory) take the plain path for attrs and counts."""
    settings = Settings(artifacts_dir=tmp_path / "art")
    storage = optuna.storages.InMemoryStorage()
    create_study(_spec(n_trials=2, constraints=["latency_p99_ms <= 50"]), storage)
    result = run_study_loop("t", storage, artifact_store=open_artifact_store(settings),
                            settings=settings)  # fmt: skip
    assert result.reason == "done" and result.ran == 2
    for trial in optuna.load_study(study_name="t", storage=storage).trials:
        (violation,) = trial.system_attrs["constraints"]
        assert trial.constraints == {"0": violation} and violation < 0
        assert trial.user_attrs["feasible"] and trial.user_attrs["candidate"]
        assert trial.user_attrs["worker"].endswith(f":{os.getpid()}")


def test_a_nan_constraint_violation_is_refused_as_optuna_does():
    from automl.records import constraint_attrs

    assert constraint_attrs([]) == {}
    with pytest.raises(ValueError, match="NaN"):
        constraint_attrs([-1.0, float("nan")])


@pytest.mark.parametrize("ours", [True, False], ids=["our-storage", "in-memory"])
def test_a_trial_started_past_the_budget_is_pruned_without_running(env, ours):
    from automl.trials.objective import StudyObjective

    _, storage, store = env
    storage = storage if ours else optuna.storages.InMemoryStorage()
    spec = _spec(n_trials=1)
    study = create_study(spec, storage)
    study.ask()  # another worker's RUNNING trial holds the only slot
    study.optimize(StudyObjective(spec, store), n_trials=1)
    pruned = study.trials[-1]
    assert pruned.state.name == "PRUNED" and pruned.user_attrs["over_budget"]
    assert "candidate" not in pruned.user_attrs


VARIANT_SPACE = """name: variants
params:
  arch.family: {type: fixed, value: mlp}
  arch.width: {type: categorical, choices: [16, 256]}
  arch.depth: {type: fixed, value: 2}
  pruning_ratio: {type: float, low: 0.0, high: 0.4, step: 0.2}
  bits: {type: categorical, choices: [32, 8]}
  batch_size: {type: categorical, choices: [32, 128]}
  train.epochs: {type: categorical, choices: [0, 3]}
"""


@pytest.fixture
def variant_space(tmp_path):
    space = tmp_path / "variants.yaml"
    space.write_text(VARIANT_SPACE)
    return str(space)


def test_the_variant_predicted_to_extend_the_front_runs_and_reuses_its_weights(env, variant_space):
    settings, storage, store = env
    spec = _spec(
        search_space=variant_space, n_trials=5, trials_per_model=3, variant_startup_trials=0
    )
    study = create_study(spec, storage)
    for width, epochs, batch in [(16, 0, 32), (16, 0, 128), (16, 3, 32), (256, 0, 32)]:
        study.enqueue_trial(
            {"arch.width": width, "train.epochs": epochs, "batch_size": batch}
            | {"pruning_ratio": 0.0, "bits": 32}
        )
    result = run_study_loop("t", storage, artifact_store=store, settings=settings)
    assert result.reason == "done" and result.ran == 5

    trials = optuna.load_study(study_name="t", storage=settings.storage).trials
    # Trials 0 and 1 show what batch 128 does to a model. Trial 2 (trained) is on the front and
    # its batch-128 deployment is predicted to extend it; trial 3 (wide, untrained) would stay
    # dominated at any batch.
    assert trials[3].values[0] < trials[2].values[0] and trials[3].values[1] > trials[2].values[1]
    assert [t.user_attrs.get("variant_of") for t in trials] == [None, None, None, None, 2]
    variant = trials[4]
    model = ("arch.width", "pruning_ratio", "train.epochs")
    assert {k: variant.params[k] for k in model} == {k: trials[2].params[k] for k in model}
    assert variant.params["batch_size"] == 128
    assert not trials[2].user_attrs["reused"]["train"]
    assert variant.user_attrs["reused"]["train"] and variant.user_attrs["reused"]["prune"]


def test_each_failure_names_the_trial_that_retried_it(tmp_path):
    settings = Settings(storage=f"sqlite:///{tmp_path}/s.db", max_retry=2)
    storage = open_storage(settings.storage, settings)
    study = create_study(_spec(name="r", n_trials=3), storage)
    retry = storage.get_heartbeat_stale_trial_callback()
    for _ in range(3):  # a worker dies in each: the first trial, then its two retries
        trial = study.ask({"arch.width": optuna.distributions.IntDistribution(16, 128, step=16)})
        storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
        retry(study, study._storage.get_trial(trial._trial_id))
    failures = get_study("r", storage).failures
    assert [(f["number"], f["retried_as"]) for f in failures] == [(0, 1), (1, 2), (2, None)]


def test_a_failed_study_runs_again_once_its_failures_are_forgiven(env):
    settings, storage, store = env
    study = create_study(_spec(n_trials=1), storage)
    for _ in range(10):  # the failures of a first run on broken data
        study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL))
    assert get_study("t", storage).state == "failed"
    loop = {"artifact_store": store, "settings": settings}
    assert run_study_loop("t", storage, **loop).reason == "too-many-failures"

    assert retry_failed("t", storage) == 10
    assert get_study("t", storage).state == "queued"
    result = run_study_loop("t", storage, **loop)
    assert (result.reason, result.ran) == ("done", 1)
    assert optuna.load_study(study_name="t", storage=storage).user_attrs[FORGIVEN_ATTR] == 10


def test_show_counts_the_infeasible_trials_per_constraint(env):
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import create_trial

    from automl.records import constraint_attrs

    _, storage, _ = env
    spec = _spec(constraints=["latency_p99_ms <= 5", "size_mb <= 0.02"])
    study = create_study(spec, storage)
    for violations in ([-1.0, 0.5], [2.0, 0.1], [-1.0, -0.01]):
        study.add_trial(create_trial(
            values=[0.9, 0.01], params={"batch_size": 1},
            distributions={"batch_size": CategoricalDistribution([1])},
            system_attrs=constraint_attrs(violations),
        ))  # fmt: skip
    info = get_study("t", storage)
    assert info.infeasible == {"latency_p99_ms <= 5": 1, "size_mb <= 0.02": 2}
