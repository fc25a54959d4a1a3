"""A quantized trial's gain over its own fp32 graph, and the mixed method inside a trial."""

from __future__ import annotations

import pytest

import automl.trials.stages as stages_module
from automl.candidate import ArchConfig, Candidate, TrainConfig
from automl.errors import SpecError
from automl.pipeline.layer_evidence import LayerEvidence, keep_order
from automl.search.objectives import Constraint
from automl.targets import load_target
from automl.trials.stage_cache import StageCache
from automl.trials.trial import run_trial

ARCH = ArchConfig("cnn", 16, 2)


def _candidate(**knobs) -> Candidate:
    return Candidate(ARCH, batch_size=8, train=TrainConfig(epochs=2), **knobs)


def test_a_quantized_trial_times_its_fp32_graph_and_says_why_when_it_did_not_pay(
    digits, tmp_path
) -> None:
    cpu = load_target("cpu")
    quantized = run_trial(_candidate(method="int8-static"), cpu, digits, tmp_path / "q")
    record = quantized.quantization
    assert record is not None and record["fp32_per_sample_ms"] > 0
    # On the CPU, the two graphs run in turn: the gain is the ratio of those runs.
    per_sample = record["quantized_per_sample_ms"]
    assert quantized.metrics["quantization_gain"] == record["fp32_per_sample_ms"] / per_sample
    assert "QLinearConv" in record["ops"]["quantized"] and "Conv" in record["ops"]["fp32"]
    assert (record["note"] is not None) == (record["gain"] <= 1)
    assert quantized.timings["quantization_gain"] > 0

    fp32 = run_trial(_candidate(method="fp32"), cpu, digits, tmp_path / "f")
    assert fp32.quantization is None and "quantization_gain" not in fp32.metrics


def test_the_mixed_method_keeps_its_evidence_order_and_measures_evidence_once(
    digits, tmp_path, monkeypatch
) -> None:
    calls = []
    measure = stages_module.layer_evidence

    def counted(*args, **kwargs):
        calls.append(args[0])
        return measure(*args, **kwargs)

    monkeypatch.setattr(stages_module, "layer_evidence", counted)
    cache = StageCache(tmp_path / "cache", max_bytes=10**9)
    cpu = load_target("cpu")
    one = run_trial(_candidate(method="int8-mixed", keep_fp32=1), cpu, digits, tmp_path / "a",
                    cache=cache)  # fmt: skip
    two = run_trial(_candidate(method="int8-mixed", keep_fp32=2), cpu, digits, tmp_path / "b",
                    cache=cache)  # fmt: skip
    assert len(calls) == 1  # the second trial's evidence came from the cache
    evidence = [LayerEvidence(**row) for row in one.history["layers"]["evidence"]]
    assert len(evidence) == 3
    assert one.history["layers"]["kept_fp32"] == keep_order(evidence)[:1]
    assert two.history["layers"]["kept_fp32"] == keep_order(evidence)[:2]
    assert two.reused["export"] and not two.reused["quantize"]
    again = run_trial(_candidate(method="int8-mixed", keep_fp32=2), cpu, digits, tmp_path / "c",
                      cache=cache)  # fmt: skip
    assert again.reused["quantize"] and again.history["layers"] == two.history["layers"]


def test_a_mixed_trial_that_kept_every_layer_says_it_quantized_none(digits, tmp_path) -> None:
    from automl.trials.quant_gain import ALL_KEPT

    trial = run_trial(_candidate(method="int8-mixed", keep_fp32=6), load_target("cpu"), digits,
                      tmp_path / "t")  # fmt: skip
    assert len(trial.history["layers"]["kept_fp32"]) == 3  # all the CNN's layers
    assert trial.quantization["note"] == ALL_KEPT


def test_keeping_layers_needs_a_per_layer_method() -> None:
    with pytest.raises(
        SpecError, match=r"only a per-layer method.*'int8-static'.*\(int8-mixed, int8-trt-mixed\)"
    ):
        _candidate(method="int8-static", keep_fp32=2)
    with pytest.raises(SpecError, match="keep_fp32=-1"):
        _candidate(method="int8-mixed", keep_fp32=-1)


def test_an_accuracy_floor_bounds_what_the_kept_layers_may_lose(digits, tmp_path) -> None:
    """``accuracy >= b`` gives the mixed method the budget of this model's fp32 accuracy above
    b; with ``accuracy_drop <= d`` too, the tighter of the two."""
    cache = StageCache(tmp_path / "cache", max_bytes=10**9)
    cpu = load_target("cpu")

    def layers(*constraints: str, name: str) -> dict:
        checked = [Constraint.model_validate(c) for c in constraints]
        trial = run_trial(_candidate(method="int8-mixed", keep_fp32=1), cpu, digits,
                          tmp_path / name, cache=cache, constraints=checked)  # fmt: skip
        return trial.history["layers"]

    fp32 = run_trial(_candidate(method="fp32"), cpu, digits, tmp_path / "f", cache=cache)
    floored = layers("accuracy >= 0.5", name="a")
    one_sample = 1 / len(digits.y_val)  # batching may move a prediction at most this much
    assert floored["drop_budget"] == pytest.approx(fp32.metrics["accuracy"] - 0.5, abs=one_sample)
    assert layers("accuracy >= 0.5", "accuracy_drop <= 0.01", name="b")["drop_budget"] == 0.01
    impossible = layers("accuracy >= 1", name="c")  # every layer breaks it: the worst kept
    evidence = [LayerEvidence(**row) for row in impossible["evidence"]]
    worst = max(evidence, key=lambda layer: layer.accuracy_drop)
    assert impossible["drop_budget"] < 0 and impossible["kept_fp32"] == [worst.name]
