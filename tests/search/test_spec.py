from __future__ import annotations

from pathlib import Path

import pytest

from automl.errors import SpecError
from automl.search.objectives import Constraint
from automl.search.spec import load_spec, parse_spec


def test_defaults_are_accuracy_against_per_sample_latency_with_a_tail_budget():
    spec = parse_spec({})
    assert spec.name == "digits-mixed-cpu"
    assert spec.metric_names == ["accuracy", "latency_per_sample_ms"]
    assert spec.directions == ["maximize", "minimize"]
    assert [str(c) for c in spec.constraints] == ["latency_p99_ms <= 5"]


def test_shipped_default_spec_loads():
    spec = load_spec("studies/digits.yaml")
    assert spec.target == "cpu" and spec.search_space == "digits-mixed"


def test_the_shipped_spec_says_its_accuracy_is_the_validation_split_s():
    lines = Path("studies/digits.yaml").read_text().splitlines()
    (accuracy,) = [line for line in lines if "metric: accuracy" in line]
    assert "on the validation split" in accuracy  # the search never sees the test split


def test_overrides_win_over_the_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: a\nn_trials: 3\n")
    spec = load_spec(path, n_trials=5, target=None)
    assert spec.n_trials == 5 and spec.target == "cpu"


def test_constraint_violation_sign():
    le = Constraint.model_validate("latency_p99_ms <= 2")
    ge = Constraint.model_validate("accuracy >= 0.9")
    assert le.violation({"latency_p99_ms": 1.5}) < 0 < le.violation({"latency_p99_ms": 2.5})
    assert ge.violation({"accuracy": 0.95}) < 0 < ge.violation({"accuracy": 0.8})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"objectives": [{"metric": "f1"}]}, "objectives.0.metric.*unknown metric 'f1'.*allowed"),
        ({"objectives": [{"metric": "accuracy", "direction": "up"}]}, "direction"),
        ({"objectives": [{"metric": "accuracy"}, {"metric": "accuracy"}]}, "repeat a metric"),
        ({"objectives": []}, "objectives"),
        ({"constraints": ["latency < 2"]}, "must look like 'latency_p99_ms <= 2'"),
        ({"constraints": ["accuracy >= 1.5"]}, "can never hold"),
        ({"constraints": ["size_mb <= 0"]}, "can never hold"),
        ({"constraints": ["vram <= 3"]}, "unknown metric 'vram'"),
        ({"objectives": [{"metric": "test_accuracy"}]}, "test split.*never searched on"),
        ({"constraints": ["test_accuracy >= 0.9"]}, "test split.*never searched on"),
        ({"sampler": "cmaes"}, "sampler.*'default', 'tpe', 'nsga2', 'random' or 'gp'"),
        ({"n_trials": 0}, "n_trials"),
        ({"n_trials": None}, "set n_trials or timeout_s"),
        ({"name": "../etc"}, "name"),
        ({"name": "trail\n"}, "name"),
        ({"name": "tab\tname"}, "name"),
        ({"seed": -1}, "seed.*greater than or equal to 0"),
        ({"seed": -99999999999999999999}, "seed"),
        ({"seed": 2**32}, "seed.*less than or equal to 4294967295"),
        ({"colour": "red"}, "colour.*Extra inputs"),
        ({"trials_per_model": 10**12}, "trials_per_model.*less than or equal to 4096"),
        ({"n_trials": 10**12}, "n_trials.*less than or equal to 1000000"),
        ({"variant_startup_trials": 10**12}, "variant_startup_trials.*less than or equal to"),
        ({"timeout_s": 10.0**12}, "timeout_s.*less than or equal to 31622400"),
        ({"timeout_s": float("nan")}, "timeout_s"),
        ({"n_trials": "1e12"}, r"n_trials: takes a number, not the text '1e12' \(YAML reads"),
        ({"n_trials": "24"}, "n_trials: takes a number, not the text '24'"),
        ({"seed": True}, "seed: takes a number, not true"),
        ({"timeout_s": "1e5"}, r"timeout_s: .*write 1\.0e\+5, with a dot and a signed exponent"),
        (
            {"model": {"factory": "m:f", "weights": "w.pt", "batch_size": 10**9}},
            r"model.batch_size: must be at most 4096, the largest batch_size",
        ),
        (
            {"serving": {"rate_rps": "1e5", "slo_p99_ms": 5}},
            "serving.rate_rps: takes a number, not the text '1e5'.*, or 'max'",
        ),
        (
            {"constraints": [{"metric": "latency_p99_ms", "op": "<=", "bound": "1e3"}]},
            "constraints.0.bound: takes a number, not the text '1e3'",
        ),
    ],
)
def test_bad_specs_name_the_field(values, message):
    with pytest.raises(SpecError, match=f"(?s){message}"):
        parse_spec(values)


def test_unreadable_spec_file(tmp_path):
    with pytest.raises(SpecError, match="cannot read study spec"):
        load_spec(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(SpecError, match="must be a mapping"):
        load_spec(tmp_path / "list.yaml")


def test_objectives_are_stored_raw_and_reach_the_sampler_in_their_scale():
    accuracy, latency = parse_spec({}).objectives
    assert (accuracy.scale, latency.scale) == ("linear", "log")
    metrics = {"accuracy": 0.9, "test_accuracy": 0.5, "latency_per_sample_ms": 0.01}
    assert (accuracy.value(metrics), latency.value(metrics)) == (0.9, 0.01)
    assert (accuracy.scaled(0.9), latency.scaled(0.01)) == (0.9, pytest.approx(-2.0))
    linear = parse_spec({"objectives": [{"metric": "size_mb", "scale": "linear"}]}).objectives[0]
    assert linear.scaled(0.5) == 0.5


def test_an_objective_may_be_just_its_metric_name():
    named = parse_spec({"objectives": ["accuracy", "size_mb"]}).objectives
    assert (
        named
        == parse_spec({"objectives": [{"metric": "accuracy"}, {"metric": "size_mb"}]}).objectives
    )
    with pytest.raises(SpecError, match=r"objectives\.0\.metric: unknown metric 'acuracy'"):
        parse_spec({"objectives": ["acuracy"]})


def test_the_schema_enumerates_the_metrics():
    from automl.records import METRICS
    from automl.search.spec import StudySpec

    defs = StudySpec.model_json_schema()["$defs"]
    as_object, as_name = defs["Objective"]["anyOf"]  # an objective, or its metric's name
    assert as_object["properties"]["metric"]["enum"] == as_name["enum"] == list(METRICS)
    assert defs["Constraint"]["properties"]["metric"]["enum"] == list(METRICS)


def test_default_names_come_from_the_space_file_or_the_model():
    assert parse_spec({"search_space": "/some/where/my space.yaml"}).name == "my-space-cpu"
    model = {"factory": "pkg.models:resnet18", "weights": "w.pt"}
    assert parse_spec({"model": model, "target": "a100"}).name == "resnet18-a100"


def test_a_serving_scenario_sets_its_objectives_and_load_metrics_need_one() -> None:
    spec = parse_spec({"serving": {"slo_p99_ms": 10}})
    assert spec.metric_names == ["accuracy", "max_rate_rps"] and spec.constraints == []
    at_rate = parse_spec({"serving": {"rate_rps": 2000, "slo_p99_ms": 10}})
    assert at_rate.metric_names == ["accuracy", "serving_p99_ms"]
    with pytest.raises(SpecError, match=r"\['max_rate_rps'\] are measured under load: add a"):
        parse_spec({"objectives": [{"metric": "accuracy"}, {"metric": "max_rate_rps"}]})
    with pytest.raises(SpecError, match="rate in"):
        parse_spec({"serving": {"rate_rps": -1, "slo_p99_ms": 10}})
    with pytest.raises(SpecError, match="slo_p99_ms"):
        parse_spec({"serving": {"rate_rps": "max"}})


def test_a_yaml_spec_whose_number_yaml_reads_as_text_says_how_to_write_it(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("n_trials: 1e3\ntrials_per_model: 3\n")
    with pytest.raises(SpecError, match=r"n_trials: .*YAML reads 1e3 as text: write 1000\)"):
        load_spec(path)
    path.write_text("n_trials: 1000\ntrials_per_model: 3\n")
    assert load_spec(path).n_trials == 1000
