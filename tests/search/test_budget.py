"""The study budget's arithmetic: the time a COMPLETE trial costs, screened ones included."""

from __future__ import annotations

from datetime import datetime, timedelta

import optuna

from automl.search.budget import seconds_per_complete

State = optuna.trial.TrialState


def _trial(state: State, seconds: float) -> optuna.trial.FrozenTrial:
    start = datetime(2026, 1, 1)
    values = [1.0] if state == State.COMPLETE else None
    trial = optuna.trial.create_trial(state=state, values=values)
    trial.datetime_start, trial.datetime_complete = start, start + timedelta(seconds=seconds)
    return trial


def test_screened_and_failed_trials_count_towards_the_time_of_a_complete_one():
    assert seconds_per_complete([_trial(State.PRUNED, 2.0), _trial(State.FAIL, 1.0)]) is None
    # A serving study: each complete trial came with nine screened ones of 1 s.
    trials = [_trial(State.COMPLETE, 4.0)] * 2 + [_trial(State.PRUNED, 1.0)] * 18
    assert seconds_per_complete(trials) == (2 * 4.0 + 18 * 1.0) / 2
    running = optuna.trial.create_trial(state=State.RUNNING)
    assert seconds_per_complete([*trials, running]) == 13.0  # not ended: not counted yet
