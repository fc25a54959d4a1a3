"""Read-side queries: why a front is empty."""

from __future__ import annotations

import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from automl.records import constraint_attrs
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.service.read import empty_front_reason, pareto_front


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
