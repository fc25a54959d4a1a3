"""The progress line's log lines: one per ended trial, each with the counts as it ended."""

from __future__ import annotations

import warnings
from datetime import datetime, timedelta

import optuna

from automl.fleet.progress_line import Status


def _study(tmp_path, metrics: dict[str, str]) -> optuna.Study:
    """A study of these objectives (metric: direction), named as automl names them."""
    study = optuna.create_study(
        storage=f"sqlite:///{tmp_path}/s.db", directions=list(metrics.values())
    )
    with warnings.catch_warnings():  # experimental in Optuna, as automl's creation knows
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(list(metrics))
    return study


_ACCURACY_LATENCY = {"accuracy": "maximize", "latency_per_sample_ms": "minimize"}


def _complete(number: int, accuracy: float, ended: datetime) -> optuna.trial.FrozenTrial:
    trial = optuna.trial.create_trial(
        values=[accuracy, 0.01 * (number + 1)],
        user_attrs={"accuracy": accuracy, "latency_per_sample_ms": 0.01 * (number + 1)},
    )
    trial.datetime_start, trial.datetime_complete = ended - timedelta(seconds=1), ended
    return trial


def test_trials_that_ended_between_refreshes_each_get_the_count_as_they_ended(tmp_path):
    study = _study(tmp_path, _ACCURACY_LATENCY)
    status = Status(study, n_trials=3)
    assert status.refresh() == []
    now = datetime.now()
    study.add_trial(_complete(0, 0.8, now))
    failed = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL)
    failed.datetime_complete = now + timedelta(seconds=1)  # between the two COMPLETE ones
    study.add_trial(failed)
    study.add_trial(_complete(2, 0.9, now + timedelta(seconds=2)))
    lines = status.refresh()
    assert [line.split("  (")[1].split(",")[0] for line in lines] == [
        "1/3 complete", "1/3 complete", "2/3 complete",
    ]  # fmt: skip
    assert "trial 2 val acc 0.9000, 0.03 ms/sample" in lines[2]
    assert "best val acc 0.9000 @ 0.03 ms/sample" in lines[2]
    assert status.refresh() == []  # each trial once


def test_a_trial_that_ends_while_the_front_is_read_is_logged_at_the_next_refresh(
    tmp_path, monkeypatch
):
    study = _study(tmp_path, _ACCURACY_LATENCY)
    status = Status(study, n_trials=3)
    now = datetime.now()
    study.add_trial(_complete(0, 0.8, now))
    read_front = Status._read_front

    def a_trial_ends_meanwhile(self: Status) -> None:
        monkeypatch.setattr(Status, "_read_front", read_front)
        study.add_trial(_complete(1, 0.9, now + timedelta(seconds=1)))
        read_front(self)

    monkeypatch.setattr(Status, "_read_front", a_trial_ends_meanwhile)
    assert [line.split(": ")[1].split(" val acc")[0] for line in status.refresh()] == ["trial 0"]
    assert [line.split(": ")[1].split(" val acc")[0] for line in status.refresh()] == ["trial 1"]


def test_a_serving_study_s_lines_give_the_max_rate(tmp_path):
    study = _study(tmp_path, {"accuracy": "maximize", "max_rate_rps": "maximize"})
    status = Status(study, n_trials=2)
    study.add_trial(optuna.trial.create_trial(values=[0.97, 38028.4]))
    (line,) = status.refresh()
    assert "val acc 0.9700, 38,028 max req/s" in line
    assert "best val acc 0.9700 @ 38,028 max req/s" in line


def test_a_trained_model_s_lines_give_its_accuracy_drop_and_speedup(tmp_path):
    study = _study(tmp_path, {"accuracy_drop": "minimize", "speedup": "maximize"})
    status = Status(study, n_trials=3)
    for drop, speedup in ((0.0, 1.0), (0.0, 1.8), (0.02, 3.1)):  # baseline, fp16, int8
        study.add_trial(optuna.trial.create_trial(values=[drop, speedup]))
    lines = status.refresh()
    assert "trial 2 acc drop +0.0200, 3.10× speedup" in lines[2]
    # The front's best in the first objective, the tie broken by the second.
    assert "best acc drop +0.0000 @ 1.80× speedup" in lines[2]
    assert "ms/sample" not in " ".join(lines)


def test_the_front_counts_as_study_pareto_shows_it_a_tie_within_noise_left_out(tmp_path):
    study = _study(tmp_path, _ACCURACY_LATENCY)
    status = Status(study, n_trials=2)
    noisy = {"latency": {"ci_rel": 0.05}}  # 5 %: 0.02289 and 0.02290 ms are one latency
    study.add_trial(optuna.trial.create_trial(values=[1.00, 0.02290], user_attrs=noisy))
    study.add_trial(optuna.trial.create_trial(values=[0.95, 0.02289], user_attrs=noisy))
    assert len(study.best_trials) == 2  # Optuna's front keeps the tie
    assert "front 1  best val acc 1.0000 @ 0.0229 ms/sample" in status.refresh()[-1]
