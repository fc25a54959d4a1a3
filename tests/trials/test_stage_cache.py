from __future__ import annotations

import os
import threading
import time

from automl.candidate import ArchConfig, TrainConfig
from automl.trials.stage_cache import StageCache, content_key


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
