"""Screening a serving study's trials: the rate to beat, a bound from the isolated latency, and
one load run."""

from __future__ import annotations

import optuna
import pytest

from automl.candidate import Batching
from automl.pipeline.serving import LoadRun
from automl.search.spec import parse_spec
from automl.trials.screen import RateToBeat, rate_bound, rate_to_beat

SPEC = parse_spec({"search_space": "digits-serving", "serving": {"slo_p99_ms": 10}})


def _study(*measured: tuple[float, float]) -> optuna.Study:
    study = optuna.create_study(directions=["maximize", "maximize"])
    for accuracy, rate in measured:
        attrs = {"accuracy": accuracy, "max_rate_rps": rate, "feasible": True}
        study.add_trial(optuna.trial.create_trial(values=[accuracy, rate], user_attrs=attrs))
    return study


def test_the_bound_is_the_instances_serving_full_batches_twice_as_fast_as_alone() -> None:
    assert rate_bound(Batching(max_batch=8, instances=2), 8, latency_p50_ms=1.0) == 32_000
    assert rate_bound(Batching(max_batch=8), 1, latency_p50_ms=1.0) is None  # timed at batch 1


def test_the_rate_to_beat_is_the_best_of_the_trials_as_good_on_every_other_objective() -> None:
    study = _study((0.95, 50_000), (0.97, 20_000), (0.99, 5_000))
    assert rate_to_beat(study, SPEC, {"accuracy": 0.90}) == RateToBeat(50_000, 0)
    assert rate_to_beat(study, SPEC, {"accuracy": 0.96}) == RateToBeat(20_000, 1)
    assert rate_to_beat(study, SPEC, {"accuracy": 0.995}) is None  # more accurate than all


def test_a_trial_beaten_even_at_its_bound_is_screened_out() -> None:
    to_beat = RateToBeat(50_000, 0)
    reason = to_beat.above_bound(20_000)
    assert reason is not None and "trial 0" in reason and "20,000 requests/s" in reason
    assert to_beat.above_bound(60_000) is None  # it could be faster


def test_a_trial_that_breaks_the_slo_at_the_rate_to_beat_is_told_why() -> None:
    run = LoadRun(50_000, 30_000, 100, 100, 0, {"p99": 12.5}, 1.0, 0.1, 12.5)
    said = RateToBeat(50_000, 3).not_held(run.as_dict(), slo_p99_ms=10)
    assert "one load run" in said and "50,000 requests/s" in said and "trial 3" in said
    assert "p99 12.5 ms against an SLO of 10 ms" in said


def test_nothing_is_screened_where_the_study_does_not_maximise_the_rate() -> None:
    at_rate = parse_spec({"serving": {"rate_rps": 100, "slo_p99_ms": 10}})
    assert rate_to_beat(_study((0.99, 1e6)), at_rate, {"accuracy": 0.5}) is None


def test_a_screened_trial_is_pruned_with_its_reason_and_no_load_runs(tmp_path) -> None:
    from automl.fleet.study_loop import run_study_loop
    from automl.records import SCREENED
    from automl.service.create import create_study
    from automl.settings import Settings
    from automl.storage.factory import open_artifact_store, open_storage

    settings = Settings(storage=f"sqlite:///{tmp_path}/s.db", artifacts_dir=tmp_path / "art")
    storage = open_storage(settings.storage, settings)
    spec = parse_spec(
        {"name": "scr", "search_space": "digits-serving", "n_trials": 3,
         "serving": {"slo_p99_ms": 10, "duration_s": 0.2}}
    )  # fmt: skip
    study = create_study(spec, storage)
    # A measured trial that nothing real can beat: perfect, and at a billion requests a second.
    study.add_trial(
        optuna.trial.create_trial(
            values=[1.0, 1e9], user_attrs={"accuracy": 1.0, "max_rate_rps": 1e9, "feasible": True}
        )
    )
    best = study.trials[-1].number  # after the capacity-first trial the study queued
    artifacts = open_artifact_store(settings)
    run_study_loop("scr", storage, artifact_store=artifacts, settings=settings, max_trials=1)

    trials = optuna.load_study(study_name="scr", storage=storage).trials
    (trial,) = [t for t in trials if t.number != best]
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert f"trial {best}, measured under load, beats it" in trial.user_attrs[SCREENED]
    assert (
        trial.user_attrs["serving"]["rate_bound_rps"] > 0 and "max_rate_rps" not in trial.user_attrs
    )
    assert trial.user_attrs["accuracy"] < 1.0  # it was built and measured in isolation


def test_repeats_are_screened_and_a_search_of_nothing_else_ends_converged(tmp_path, monkeypatch):
    """Two deployments and n_trials 10: each is measured once, every repeat is screened, and
    the study ends after five screened in a row (the patched cap), done, not looping on."""
    from automl.fleet.study_loop import run_study_loop
    from automl.records import CONVERGED_ATTR, REPEAT_OF, SCREENED
    from automl.service.create import create_study
    from automl.service.studies import get_study
    from automl.settings import Settings
    from automl.storage.factory import open_artifact_store, open_storage

    monkeypatch.setattr("automl.trials.objective.converged_after", lambda n_trials: 5)
    (tmp_path / "two.yaml").write_text(
        "name: two\nserving: {rate_rps: max, slo_p99_ms: 100, duration_s: 0.2}\nparams:\n"
        "  arch.family: {type: fixed, value: mlp}\n  arch.width: {type: fixed, value: 16}\n"
        "  train.epochs: {type: fixed, value: 1}\n"
        "  serving.max_batch: {type: categorical, choices: [1, 8]}\n"
    )
    settings = Settings(storage=f"sqlite:///{tmp_path}/s.db", artifacts_dir=tmp_path / "art")
    storage = open_storage(settings.storage, settings)
    spec = parse_spec({"name": "two", "search_space": str(tmp_path / "two.yaml"), "n_trials": 10})
    create_study(spec, storage)
    artifacts = open_artifact_store(settings)
    result = run_study_loop("two", storage, artifact_store=artifacts, settings=settings)

    info = get_study("two", storage)
    assert result.reason == "converged" and info.state == "done"
    assert info.converged.startswith("converged: its last 5 trials in a row were screened out")
    trials = optuna.load_study(study_name="two", storage=storage).trials
    firsts = [t for t in trials if REPEAT_OF not in t.user_attrs]
    assert len({t.params["serving.max_batch"] for t in firsts}) == len(firsts) == 2
    repeats = [t for t in trials if REPEAT_OF in t.user_attrs]
    assert all(SCREENED in t.user_attrs for t in trials[-5:]) and len(repeats) >= 3
    assert optuna.trial.TrialState.WAITING not in {t.state for t in trials}
    for repeat in repeats:
        assert repeat.state == optuna.trial.TrialState.PRUNED and "serving" not in repeat.user_attrs
        assert trials[repeat.user_attrs[REPEAT_OF]].params == repeat.params
        assert f"trial {repeat.user_attrs[REPEAT_OF]} has measured" in repeat.user_attrs[SCREENED]
    study = create_study(spec, storage)  # a resume may search on
    assert not study.user_attrs.get(CONVERGED_ATTR) and get_study("two", storage).state == "queued"


def test_an_untried_deployment_is_drawn_past_the_measured_and_the_queued_ones(tmp_path):
    import numpy as np

    from automl.search.space import load_space
    from automl.trials.screen import untried_params

    (tmp_path / "three.yaml").write_text(
        "name: three\nparams:\n  arch.family: {type: fixed, value: mlp}\n"
        "  serving.max_batch: {type: categorical, choices: [1, 8, 32]}\n"
    )
    space = load_space(str(tmp_path / "three.yaml"))
    study = optuna.create_study()
    dist = {"serving.max_batch": optuna.distributions.CategoricalDistribution([1, 8, 32])}
    study.add_trial(optuna.trial.create_trial(value=1.0, params={"serving.max_batch": 1},
                                              distributions=dist))  # fmt: skip
    study.enqueue_trial({"serving.max_batch": 8})
    rng = np.random.default_rng(0)
    assert untried_params(study, space, rng) == {"serving.max_batch": 32}
    study.enqueue_trial({"serving.max_batch": 32})
    assert untried_params(study, space, rng) is None  # every deployment is taken


@pytest.mark.parametrize("slo_ms", [0.0001, 60_000.0])
def test_a_trial_measured_while_the_harness_floor_is_over_the_limit_fails_off_the_front(
    tmp_path, slo_ms
):
    """The floor is measured for real: a 0.1 µs SLO puts any host's over a tenth of it, so the
    trial's load runs are measured again, and the trial fails with the reason; a minute-long
    SLO keeps it under, and the trial is recorded as before."""
    from automl.fleet.study_loop import run_study_loop
    from automl.records import FAIL_REASON
    from automl.service.create import create_study
    from automl.service.read import empty_front_reason, pareto_front
    from automl.service.studies import get_study
    from automl.settings import Settings
    from automl.storage.factory import open_artifact_store, open_storage

    (tmp_path / "one.yaml").write_text(
        "name: one\nparams:\n  arch.family: {type: fixed, value: mlp}\n"
        "  arch.width: {type: fixed, value: 16}\n  train.epochs: {type: fixed, value: 1}\n"
    )
    settings = Settings(storage=f"sqlite:///{tmp_path}/s.db", artifacts_dir=tmp_path / "art")
    storage = open_storage(settings.storage, settings)
    spec = parse_spec(
        {"name": "busy", "search_space": str(tmp_path / "one.yaml"), "n_trials": 1,
         "serving": {"rate_rps": 200, "slo_p99_ms": slo_ms, "duration_s": 0.1}}
    )  # fmt: skip
    create_study(spec, storage)
    artifacts = open_artifact_store(settings)
    run_study_loop("busy", storage, artifact_store=artifacts, settings=settings, max_trials=1)

    (trial,) = optuna.load_study(study_name="busy", storage=storage).trials
    if slo_ms < 1:
        assert trial.state == optuna.trial.TrialState.FAIL and "serving" not in trial.user_attrs
        reason = trial.user_attrs[FAIL_REASON]
        assert reason.startswith("TrialFailed: the load harness alone took p99 ")
        assert "(limit 0.10)" in reason and "rerun on a quieter host" in reason
        assert get_study("busy", storage).failures[0]["reason"] == reason  # study show, the API
        assert pareto_front("busy", storage) == []
        assert "1 failed: `automl study show busy` says why" in empty_front_reason("busy", storage)
    else:
        assert trial.state == optuna.trial.TrialState.COMPLETE
        served = trial.user_attrs["serving"]
        assert served["floor_share_of_slo"] <= 0.1 and "floor_share_before_remeasure" not in served
        assert [row.number for row in pareto_front("busy", storage)] == [trial.number]
