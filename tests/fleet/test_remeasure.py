"""Re-measuring the front: more runs until each latency budget is decided, or a cap."""

from __future__ import annotations

import optuna
import pytest

from automl.fleet.remeasure import REMEASURED_ATTR, remeasure_front
from automl.fleet.study_loop import run_study_loop
from automl.pipeline.latency_decision import fewest_runs
from automl.search.objectives import Constraint
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.service.read import pareto_front
from automl.settings import Settings
from automl.storage.factory import open_artifact_store, open_storage

NAME = "r"
# Budgets no small MLP misses, so that each is decided once its runs can bound it.
CONSTRAINTS = ["latency_p99_ms <= 1000", "size_mb <= 10"]


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("remeasure")
    settings = Settings(storage=f"sqlite:///{root}/s.db", artifacts_dir=root / "art")
    storage, store = open_storage(settings.storage, settings), open_artifact_store(settings)
    spec = {"name": NAME, "search_space": "digits-mlp", "n_trials": 2, "constraints": CONSTRAINTS}
    created = create_study(parse_spec(spec), storage)
    for width, bits in ((16, 32), (64, 8)):
        created.enqueue_trial({"arch.width": width, "arch.depth": 1, "pruning_ratio": 0.0,
                               "bits": bits, "batch_size": 1})  # fmt: skip
    run_study_loop(NAME, storage, artifact_store=store, settings=settings)
    return {"settings": settings, "storage": storage, "store": store}


def test_the_study_constraints_on_latency_are_decided_by_default(study: dict) -> None:
    results = remeasure_front(NAME, study["storage"], study["store"])

    front = pareto_front(NAME, study["storage"])
    assert sorted(results) == sorted(t["number"] for t in front)
    for record in results.values():
        (decision,) = record["decisions"]  # the size constraint is not a latency one
        assert (decision["metric"], decision["verdict"]) == ("latency_p99_ms", "meets")
        assert record["stop"] == "decided"
        assert record["runs"] >= fewest_runs(0.99) and decision["runs"] == record["runs"]
        p99 = record["intervals"]["latency_p99_ms"]
        assert p99["low_ms"] <= p99["value_ms"] <= p99["high_ms"] <= 1000
        quantiles = {"latency_p50_ms", "latency_p90_ms", "latency_p95_ms", "latency_p99_ms"}
        assert set(record["intervals"]) == quantiles  # each registered, in ms per batch
        assert record["env"]["target"] == "cpu" and record["first_p50_ms"] > 0
    stored = optuna.load_study(study_name=NAME, storage=study["settings"].storage)
    assert stored.user_attrs[REMEASURED_ATTR] == {str(n): r for n, r in results.items()}


def test_a_budget_no_model_meets_is_shown_exceeded(study: dict) -> None:
    budget = Constraint.model_validate("latency_p50_ms <= 0.000001")

    results = remeasure_front(NAME, study["storage"], study["store"], budgets=[budget])

    for record in results.values():
        (decision,) = record["decisions"]
        assert decision["verdict"] == "exceeds" and decision["low"] > decision["bound"]


def test_the_cap_leaves_a_p99_budget_within_noise_and_says_why(study: dict) -> None:
    budget = Constraint.model_validate("latency_p99_ms <= 1000")

    results = remeasure_front(
        NAME, study["storage"], study["store"], budgets=[budget], max_seconds=0.0
    )

    for record in results.values():
        (decision,) = record["decisions"]
        assert (record["stop"], record["runs"]) == ("cap", 1)
        assert decision["verdict"] == "within-noise" and decision["high"] is None
        assert "needs at least 563 runs, got 1" in decision["reason"]


def test_each_model_is_timed_alone_on_the_engine_its_trial_built(study: dict, monkeypatch) -> None:
    import contextlib

    import automl.fleet.remeasure as remeasure

    calls = []

    @contextlib.contextmanager
    def lock(target):
        calls.append(("lock", target.name))
        yield

    @contextlib.contextmanager
    def engines(path, batch, target, method, cache):
        calls.append(("engines", batch, method, cache is not None and cache.root))
        yield None

    monkeypatch.setattr(remeasure, "measurement_lock", lock)
    monkeypatch.setattr(remeasure, "engine_folder", engines)
    results = remeasure_front(NAME, study["storage"], study["store"], settings=study["settings"])
    front = pareto_front(NAME, study["storage"])
    assert len(results) == len(front) and calls.count(("lock", "cpu")) == len(front)
    expected = [("engines", r["user_attrs"]["candidate"]["batch_size"],
                 r["user_attrs"]["latency"]["method"], False)
                for r in front]  # fmt: skip
    assert [c for c in calls if c[0] == "engines"] == expected  # a cpu target has no engines
