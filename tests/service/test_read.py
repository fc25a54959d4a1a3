"""Read-side queries: why a front is empty, and which trials a front shows."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from automl.records import constraint_attrs
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.service.read import (
    empty_front_reason,
    pareto_front,
    shown_front,
    study_trials,
    trial_detail,
)


@pytest.fixture
def storage(env):
    return env[1]  # the SQLite study store of tests/conftest.py's env


def test_an_empty_front_names_each_broken_constraint_with_the_closest_breaking_value(storage):
    spec = parse_spec({"name": "t", "search_space": "digits-mlp", "n_trials": 3,
                       "constraints": ["latency_p99_ms <= 5", "size_mb <= 1"]})  # fmt: skip
    study = create_study(spec, storage)
    assert empty_front_reason("t", storage) == "study 't' has no complete trial yet"
    # A is small but slow; B fast but large: A's 0.5 MB must not be B's closest size.
    for p99, size in ((9.0, 0.5), (3.0, 2.0), (7.0, 4.0)):
        study.add_trial(create_trial(
            values=[0.9, 0.01], params={"batch_size": 1},
            distributions={"batch_size": CategoricalDistribution([1])},
            user_attrs={"latency_p99_ms": p99, "size_mb": size},
            system_attrs=constraint_attrs([p99 - 5, size - 1]),
        ))  # fmt: skip
    assert pareto_front("t", storage) == []
    said = empty_front_reason("t", storage)
    assert "each of its 3 complete trial(s) breaks one of" in said
    assert "latency_p99_ms <= 5 (broken by 2; the closest of them reached 7)" in said
    assert "size_mb <= 1 (broken by 2; the closest of them reached 2)" in said


def _timed(accuracy: float, ms: float, noise: float) -> optuna.trial.FrozenTrial:
    return create_trial(
        values=[accuracy, ms], params={"batch_size": 1},
        distributions={"batch_size": CategoricalDistribution([1])},
        user_attrs={"accuracy": accuracy, "latency_per_sample_ms": ms, "latency": {"ci_rel": noise}},
        system_attrs=constraint_attrs([-1.0]),
    )  # fmt: skip


def test_a_trial_on_the_front_only_through_noise_is_left_out_for_the_better_one(storage):
    study = create_study(parse_spec({"name": "t", "search_space": "digits-mlp"}), storage)
    # Trial 0 is 0.02 % faster than trial 1, far within 1 % noise, and 5 points less accurate.
    for accuracy, ms in ((0.95, 0.0002290), (1.00, 0.00022905), (0.90, 0.0001)):
        study.add_trial(_timed(accuracy, ms, noise=0.01))
    assert {t.number for t in study.best_trials} == {0, 1, 2}  # Optuna's front keeps it
    front = pareto_front("t", storage)
    assert [(r.number, r.ties) for r in front] == [(1, (0,)), (2, ())]
    assert trial_detail("t", storage, 0)["on_front"] is False
    assert [r.number for r in study_trials("t", storage)[1] if r.on_front] == [1, 2]


def test_a_chain_of_ties_within_noise_keeps_a_real_difference():
    objectives = parse_spec({}).objectives  # accuracy up, latency per sample down
    # 1 ties 0 on latency and is more accurate; 2 ties 1 likewise; 2 is 3 % slower than 0.
    trials = [_timed(0.96, 1.0, 0.02), _timed(0.97, 1.015, 0.02), _timed(0.98, 1.03, 0.02)]
    for number, trial in enumerate(trials):
        trial.number = number
    assert shown_front(trials, objectives) == {0: (), 2: (1,)}
    precise = [_timed(0.96, 1.0, 0.001), _timed(0.97, 1.015, 0.001)]
    for number, trial in enumerate(precise):
        trial.number = number
    assert shown_front(precise, objectives) == {0: (), 1: ()}  # 1.5 % apart is a difference
