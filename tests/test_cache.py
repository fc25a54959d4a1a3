from __future__ import annotations

import os
import threading
import time

import pytest

from automl.cache import StageCache, content_key
from automl.candidate import ArchConfig, Candidate, TrainConfig
from automl.targets import load_target
from automl.trial import run_trial


def test_content_key_depends_on_every_part():
    base = content_key("train", ArchConfig("cnn", 8, 1), TrainConfig(), "fp", 0)
    assert base == content_key("train", ArchConfig("cnn", 8, 1), TrainConfig(), "fp", 0)
    assert base != content_key("train", ArchConfig("cnn", 16, 1), TrainConfig(), "fp", 0)
    assert base != content_key("train", ArchConfig("cnn", 8, 1), TrainConfig(lr=0.1), "fp", 0)
    assert base != content_key("train", ArchConfig("cnn", 8, 1), TrainConfig(), "fp2", 0)
    assert base != content_key("train", ArchConfig("cnn", 8, 1), TrainConfig(), "fp", 1)


def test_put_get_and_size_bound(tmp_path):
    cache = StageCache(tmp_path / "c", max_bytes=2500)
    for i in range(4):
        source = tmp_path / f"s{i}"
        source.write_bytes(bytes(1000))
        cache.put("train", f"k{i}", ".pt", source)
    names = sorted(p.name for p in (tmp_path / "c").iterdir())
    assert names == ["train-k2.pt", "train-k3.pt"]
    assert cache.get("train", "k0", ".pt") is None
    assert cache.get("train", "k3", ".pt").read_bytes() == bytes(1000)


def test_concurrent_writers_leave_whole_entries(tmp_path):
    cache = StageCache(tmp_path / "c", max_bytes=10**9)
    sources = []
    for i in range(8):
        source = tmp_path / f"s{i}"
        source.write_bytes(bytes([i]) * 200_000)
        sources.append(source)
    threads = [threading.Thread(target=cache.put, args=("q", "same", ".onnx", s)) for s in sources]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    content = cache.get("q", "same", ".onnx").read_bytes()
    assert len(content) == 200_000 and len(set(content)) == 1
    assert [p.name for p in (tmp_path / "c").iterdir()] == ["q-same.onnx"]


def test_a_failed_write_is_logged_and_leaves_nothing_behind(tmp_path, caplog):
    cache = StageCache(tmp_path / "c", max_bytes=10**9)
    orphan = tmp_path / "c" / ".tmp-killed-writer"
    orphan.write_bytes(bytes(10))
    os.utime(orphan, (time.time() - 7200, time.time() - 7200))
    assert cache.put("train", "k", ".pt", tmp_path / "missing") is None
    assert "train-k.pt not stored" in caplog.text
    assert list((tmp_path / "c").iterdir()) == [orphan]
    fresh = tmp_path / "c" / ".tmp-running-writer"
    fresh.write_bytes(bytes(10))
    source = tmp_path / "s"
    source.write_bytes(bytes(10))
    cache.put("train", "k", ".pt", source)
    # An hour-old temporary file had a killed writer; a fresh one may still be written.
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == [fresh.name, "train-k.pt"]


@pytest.mark.parametrize(
    "text",
    ['{"quantized": ', '{"quantized": {}, "onnx_max_abs_diff": 0.0}'],
    ids=["cut short", "an older version's"],
)
def test_an_unreadable_quantize_entry_is_recomputed(digits, tmp_path, text):
    cache = StageCache(tmp_path / "cache", max_bytes=10**9)
    candidate = Candidate(ArchConfig("mlp", 16, 1), pruning_ratio=0.0, bits=8, batch_size=8)
    first = run_trial(candidate, load_target("cpu"), digits, tmp_path / "a", cache=cache)
    (meta,) = (tmp_path / "cache").glob("quantize-*.json")
    meta.write_text(text)  # e.g. cut short on a full disk
    again = run_trial(candidate, load_target("cpu"), digits, tmp_path / "b", cache=cache)
    assert again.reused == {"train": True, "prune": True, "export": True, "quantize": False}
    assert again.metrics["accuracy"] == first.metrics["accuracy"]


def _model_metrics(outcome) -> dict:
    return {
        k: v for k, v in outcome.metrics.items() if "latency" not in k and k != "throughput_sps"
    }


@pytest.mark.parametrize("bits", [32, 8])
def test_trials_reuse_cached_stages_with_identical_results(digits, tmp_path, bits):
    cache = StageCache(tmp_path / "cache", max_bytes=10**9)
    target = load_target("cpu")
    candidate = Candidate(ArchConfig("cnn", 16, 2), pruning_ratio=0.3, bits=bits, batch_size=8)

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

    other_bits = run(Candidate(**{**candidate.__dict__, "bits": 16}), "f")
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
