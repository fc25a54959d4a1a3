from __future__ import annotations

import math

import optuna
import pytest

from automl.search.samplers import ScaledValuesSampler
from automl.search.spec import parse_spec


class RecordingSampler(optuna.samplers.RandomSampler):
    """A random sampler that records the objective values it reads, the way TPE reads them."""

    def __init__(self) -> None:
        super().__init__(seed=0)
        self.seen: list[list[float]] = []

    def sample_independent(self, study, trial, param_name, param_distribution):
        complete = study._get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        self.seen = [list(t.values) for t in complete]
        assert [list(t.values) for t in study.get_trials(states=None) if t.values] == self.seen
        return super().sample_independent(study, trial, param_name, param_distribution)


def test_the_sampler_sees_scaled_values_while_the_study_stores_raw_ones():
    spec = parse_spec({})  # accuracy (linear), latency_per_sample_ms (log)
    base = RecordingSampler()
    study = optuna.create_study(
        directions=spec.directions, sampler=ScaledValuesSampler(base, spec.objectives)
    )
    raw = [[0.9, 0.01], [0.8, 0.001]]
    for _ in raw:
        study.enqueue_trial({"x": 0.5})
    for values in raw:
        trial = study.ask()
        trial.suggest_float("x", 0, 1)
        study.tell(trial, values)
    study.ask().suggest_float("x", 0, 1)

    assert [t.values for t in study.trials if t.values] == raw
    assert base.seen == [[0.9, pytest.approx(-2.0)], [0.8, pytest.approx(-3.0)]]
    assert math.log10(study.trials[0].values[1]) == pytest.approx(base.seen[0][1])


def test_the_sampler_never_sees_a_screened_repeat_of_a_measured_deployment():
    from automl.records import REPEAT_OF

    spec = parse_spec({})
    seen: list[int] = []

    class Recording(optuna.samplers.RandomSampler):
        def sample_independent(self, study, trial, param_name, param_distribution):
            seen[:] = [t.number for t in study._get_trials(deepcopy=False, states=None)]
            return super().sample_independent(study, trial, param_name, param_distribution)

    sampler = ScaledValuesSampler(Recording(seed=0), spec.objectives)
    study = optuna.create_study(directions=spec.directions, sampler=sampler)
    first = study.ask()
    first.suggest_float("x", 0, 1)
    study.tell(first, [0.9, 0.01])
    repeat = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    repeat.set_user_attr(REPEAT_OF, first.number)
    study.tell(repeat, state=optuna.trial.TrialState.PRUNED)
    study.ask().suggest_float("x", 0, 1)
    assert seen == [0, 2]  # the measured trial and the one sampling; not the repeat
