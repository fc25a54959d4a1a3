"""The progress line's log lines: one per ended trial, each with the counts as it ended."""

from __future__ import annotations

from datetime import datetime, timedelta

import optuna

from automl.fleet.progress_line import Status


def _complete(number: int, accuracy: float, ended: datetime) -> optuna.trial.FrozenTrial:
    trial = optuna.trial.create_trial(
        values=[accuracy, 0.01 * (number + 1)],
        user_attrs={"accuracy": accuracy, "latency_per_sample_ms": 0.01 * (number + 1)},
    )
    trial.datetime_start, trial.datetime_complete = ended - timedelta(seconds=1), ended
    return trial


def test_trials_that_ended_between_refreshes_each_get_the_count_as_they_ended(tmp_path):
    study = optuna.create_study(
        storage=f"sqlite:///{tmp_path}/s.db", directions=["maximize", "minimize"]
    )
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
    assert "trial 2 accuracy 0.900" in lines[2] and "best acc 0.900" in lines[2]
    assert status.refresh() == []  # each trial once


def test_a_trial_that_ends_while_the_front_is_read_is_logged_at_the_next_refresh(
    tmp_path, monkeypatch
):
    study = optuna.create_study(
        storage=f"sqlite:///{tmp_path}/s.db", directions=["maximize", "minimize"]
    )
    status = Status(study, n_trials=3)
    now = datetime.now()
    study.add_trial(_complete(0, 0.8, now))
    read_front = Status._read_front

    def a_trial_ends_meanwhile(self: Status) -> None:
        monkeypatch.setattr(Status, "_read_front", read_front)
        study.add_trial(_complete(1, 0.9, now + timedelta(seconds=1)))
        read_front(self)

    monkeypatch.setattr(Status, "_read_front", a_trial_ends_meanwhile)
    assert [line.split(": ")[1].split(" accuracy")[0] for line in status.refresh()] == ["trial 0"]
    assert [line.split(": ")[1].split(" accuracy")[0] for line in status.refresh()] == ["trial 1"]


def test_a_serving_study_s_lines_give_the_max_rate(tmp_path):
    study = optuna.create_study(
        storage=f"sqlite:///{tmp_path}/s.db", directions=["maximize", "maximize"]
    )
    status = Status(study, n_trials=2)
    served = _complete(0, 0.97, datetime.now())
    served.user_attrs["max_rate_rps"] = 38028.4
    study.add_trial(served)
    (line,) = status.refresh()
    assert "accuracy 0.970, 38,028 req/s" in line and "best acc 0.970 @ 38,028 req/s" in line
