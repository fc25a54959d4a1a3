"""Trials reuse cached stages: identical results, and no torch model where a graph is cached."""

from __future__ import annotations

from dataclasses import replace

import onnx
import pytest

from automl.candidate import ArchConfig, Candidate, TrainConfig
from automl.targets import load_target
from automl.trials.stage_cache import StageCache
from automl.trials.stages import CachedStages
from automl.trials.trial import run_trial


@pytest.mark.parametrize(
    "text",
    ['{"quantized": ', '{"quantized": {}, "onnx_max_abs_diff": 0.0}'],
    ids=["cut short", "an older version's"],
)
def test_an_unreadable_quantize_entry_is_recomputed(digits, tmp_path, text):
    cache = StageCache(tmp_path / "cache", max_bytes=10**9)
    candidate = Candidate(
        ArchConfig("mlp", 16, 1), pruning_ratio=0.0, method="int8-static", batch_size=8
    )
    first = run_trial(candidate, load_target("cpu"), digits, tmp_path / "a", cache=cache)
    (meta,) = (tmp_path / "cache").glob("quantize-*.json")
    meta.write_text(text)  # e.g. cut short on a full disk
    again = run_trial(candidate, load_target("cpu"), digits, tmp_path / "b", cache=cache)
    assert again.reused == {"train": True, "prune": True, "export": True, "quantize": False}
    assert again.metrics["accuracy"] == first.metrics["accuracy"]


def _model_metrics(outcome) -> dict:
    timed = ("throughput_sps", "quantization_gain")
    return {k: v for k, v in outcome.metrics.items() if "latency" not in k and k not in timed}


@pytest.mark.parametrize("method", ["fp32", "int8-static"])
def test_trials_reuse_cached_stages_with_identical_results(digits, tmp_path, method):
    cache = StageCache(tmp_path / "cache", max_bytes=10**9)
    target = load_target("cpu")
    candidate = Candidate(ArchConfig("cnn", 16, 2), pruning_ratio=0.3, method=method, batch_size=8)

    def run(c, name):
        return run_trial(c, target, digits, tmp_path / name, cache=cache)

    first = run(candidate, "a")
    assert first.reused == dict.fromkeys(("train", "prune", "export", "quantize"), False)
    again = run(candidate, "b")
    assert again.reused == dict.fromkeys(("train", "prune", "export", "quantize"), True)
    assert again.timings["train"] == again.timings["prune"] == 0  # no torch model is built
    assert _model_metrics(again) == _model_metrics(first)
    assert again.history == first.history
    assert again.artifact.read_bytes() == first.artifact.read_bytes()

    other_bits = run(replace(candidate, method="fp16"), "f")
    assert other_bits.reused == {"train": True, "prune": True, "export": True, "quantize": False}
    assert other_bits.timings["train"] == other_bits.timings["prune"] == 0
    assert other_bits.metrics["macs"] == first.metrics["macs"]
    assert other_bits.history["finetune"] == first.history["finetune"]

    other_ratio = run(Candidate(**{**candidate.__dict__, "pruning_ratio": 0.5}), "c")
    assert other_ratio.reused == {"train": True, "prune": False, "export": False,
                                  "quantize": False}  # fmt: skip
    uncached = run_trial(
        Candidate(**{**candidate.__dict__, "pruning_ratio": 0.5}), target, digits, tmp_path / "d"
    )
    assert uncached.metrics["accuracy"] == other_ratio.metrics["accuracy"]
    other_batch = run(Candidate(**{**candidate.__dict__, "batch_size": 32}), "e")
    assert all(other_batch.reused.values())


@pytest.mark.parametrize("ratio", [0.0, 0.3])
def test_weights_trained_on_another_device_are_other_entries(digits, tmp_path, ratio):
    candidate = Candidate(ArchConfig("mlp", 16, 1), pruning_ratio=ratio, batch_size=8)

    def stages(device: str) -> CachedStages:
        return CachedStages(candidate, digits, tmp_path, 0, 1, device, cache=None)

    cpu, cuda = stages("cpu"), stages("cuda")

    assert cpu.train_key == stages("cpu").train_key != cuda.train_key
    assert cpu.quant_key != cuda.quant_key  # and so every stage after training


def test_a_trained_model_on_other_data_is_another_entry_of_every_stage(
    digits, digits_cnn_weights, tmp_path
):
    from automl.inputs.data import load_dataset
    from automl.inputs.trained_model import open_trained

    trained = open_trained("trained_factories:digits_cnn", digits_cnn_weights)
    other = load_dataset("digits", seed=1)  # other splits: another fine-tune and calibration
    candidate = Candidate(ArchConfig("cnn", 16, 2), pruning_ratio=0.3, method="int8-static")

    def stages(data) -> CachedStages:
        return CachedStages(candidate, data, tmp_path, 0, 1, "cpu", cache=None, trained=trained)

    assert digits.fingerprint != other.fingerprint
    assert stages(digits).train_key == stages(digits).train_key != stages(other).train_key
    assert stages(digits).quant_key != stages(other).quant_key


def test_a_pruned_trial_keeps_the_targets_channel_multiple(digits, tmp_path):
    target = load_target("cpu")
    candidate = Candidate(ArchConfig("cnn", 40, 2), pruning_ratio=0.3, batch_size=8,
                          train=TrainConfig(epochs=1), finetune_epochs=1)  # fmt: skip
    outcome = run_trial(candidate, target, digits, tmp_path / "t")
    graph = onnx.load(str(tmp_path / "t" / "model-fp32.onnx")).graph
    weights = {i.name: i.dims for i in graph.initializer}
    convs = [weights[n.input[1]][0] for n in graph.node if n.op_type == "Conv"]
    assert convs and all(c % target.channel_multiple == 0 and c < 40 for c in convs), convs
    assert outcome.metrics["params"] < outcome.metrics["params_unpruned"]
