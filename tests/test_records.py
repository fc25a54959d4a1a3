"""The trial record: read from a trial's attrs in one place, typed, and still a mapping."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import optuna
import pytest

from automl.records import BUILT, RECORDED_METRICS, TrialRecord, front_columns


def _trial(**attrs: object) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(
        params={"batch_size": 8},
        distributions={"batch_size": optuna.distributions.CategoricalDistribution([1, 8])},
        values=[0.9, 1.5],
        user_attrs={"accuracy": 0.9, "latency_per_sample_ms": 1.5, "test_accuracy": 0.88, **attrs},
    )


def test_a_record_reads_the_metrics_the_objectives_and_the_keys_of_a_trial() -> None:
    record = TrialRecord.of(
        _trial(artifact_id="a1", baseline=True, feasible=True, note="kept"),
        ["accuracy", "latency_per_sample_ms"],
        on_front=False,
    )

    assert record.values == {"accuracy": 0.9, "latency_per_sample_ms": 1.5}
    assert record.metrics == {"accuracy": 0.9, "latency_per_sample_ms": 1.5, "test_accuracy": 0.88}
    assert set(record.metrics) <= set(RECORDED_METRICS)
    assert (record.artifact_id, record.baseline, record.feasible) == ("a1", True, True)
    assert record.user_attrs["note"] == "kept" and record.on_front is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.number = 3  # type: ignore[misc]


def test_a_record_reads_as_the_mapping_that_front_rows_always_were() -> None:
    record = TrialRecord.of(_trial(), ["accuracy"], on_front=True)

    assert record["metrics"]["accuracy"] == 0.9 and record.get("fail_reason") is None
    assert {**record}["params"] == {"batch_size": 8} and "on_front" in record
    assert record.get("no such field", "default") == "default"
    assert dict(record.items()) == {**record} and len({**record}) == 14
    with pytest.raises(KeyError):
        record["latency"]  # a user attr is no field: read it from user_attrs


def test_every_column_is_a_recorded_metric_or_derived_from_them() -> None:
    derived = {"accuracy_gap"}
    every = SimpleNamespace(model=object(), serving=object())  # a trained model's, served
    keys = {c.key for c in front_columns(every)}
    assert keys - derived <= set(RECORDED_METRICS)


def _mixed(keep_fp32: int, history: dict) -> TrialRecord:
    candidate = {"arch": None, "pruning_ratio": 0.0, "method": "int8-mixed", "batch_size": 32,
                 "keep_fp32": keep_fp32}  # fmt: skip
    return TrialRecord.of(_trial(candidate=candidate, history=history), [], on_front=True)


def test_an_int8_mixed_trial_that_kept_every_layer_reads_as_fp32() -> None:
    recorded = _mixed(4, {BUILT: {"method": "fp32", "widths": [16, 16, 32]}})
    assert (recorded.method, recorded.label) == ("fp32", "fp32 (all layers kept) batch 32")
    # Recorded before BUILT was: its layer evidence still tells.
    layers = {"evidence": [{"name": n} for n in "abcd"], "kept_fp32": list("abcd")}
    assert _mixed(4, {"layers": layers}).method == "fp32"
    some = {"evidence": [{"name": n} for n in "abcd"], "kept_fp32": ["a"]}
    assert _mixed(1, {"layers": some}).method == "int8-mixed"
    assert "int8-mixed" in _mixed(1, {"layers": some}).label


def test_the_terminal_shows_the_models_own_speedup_beside_the_batching_gain() -> None:
    trained = SimpleNamespace(model=object(), serving=None)
    labels = {c.key: c.label for c in front_columns(trained, brief=True)}
    assert labels["speedup"] == "speedup with batching"
    assert labels["speedup_same_batch"] == "speedup at same batch"
