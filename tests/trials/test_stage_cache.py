from __future__ import annotations

import os
import threading
import time

import pytest
from disks import tmpfs

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


def test_an_entry_that_does_not_fit_on_the_disk_leaves_no_partial_file(tmp_path, caplog):
    with tmpfs(tmp_path / "c", size_kb=256) as folder:
        cache = StageCache(folder, max_bytes=10**9)
        source = tmp_path / "s"
        source.write_bytes(bytes(1024 * 1024))
        assert cache.put("train", "k", ".pt", source) is None
        assert "No space left on device" in caplog.text
        assert list(folder.iterdir()) == []


def _entries(cache: StageCache) -> list[str]:
    return sorted(p.name for p in cache.root.iterdir())


def test_an_engine_folder_is_published_whole_and_each_trial_works_on_a_copy(tmp_path):
    cache = StageCache(tmp_path, max_bytes=10**6)

    with cache.engine_folder("g1") as building:
        assert building.name.startswith(".tmp-")  # private while TensorRT writes into it
        (building / "model.engine").write_bytes(b"x" * 100)
        assert _entries(cache) == [building.name]

    assert _entries(cache) == ["tensorrt-g1"]
    with cache.engine_folder("g1") as reused:
        assert reused.name.startswith(".tmp-")
        assert (reused / "model.engine").read_bytes() == b"x" * 100  # no build again
        (reused / "model.engine").write_bytes(b"rebuilt for another shape")

    assert _entries(cache) == ["tensorrt-g1"]
    assert (tmp_path / "tensorrt-g1" / "model.engine").read_bytes() == b"x" * 100


def test_a_failed_build_publishes_nothing(tmp_path):
    cache = StageCache(tmp_path, max_bytes=10**6)

    with (
        pytest.raises(RuntimeError, match="engine build failed"),
        cache.engine_folder("g1") as building,
    ):
        (building / "model.engine").write_bytes(b"half")
        raise RuntimeError("engine build failed")

    assert _entries(cache) == []


def test_the_first_worker_to_publish_keeps_its_engines(tmp_path):
    cache = StageCache(tmp_path, max_bytes=10**6)

    with cache.engine_folder("g1") as slow:
        (slow / "model.engine").write_bytes(b"slow")
        with cache.engine_folder("g1") as fast:
            (fast / "model.engine").write_bytes(b"fast")

    assert _entries(cache) == ["tensorrt-g1"]
    assert (tmp_path / "tensorrt-g1" / "model.engine").read_bytes() == b"fast"


def test_engine_folders_are_evicted_by_size_like_any_entry(tmp_path):
    cache = StageCache(tmp_path, max_bytes=250)
    with cache.engine_folder("old") as building:
        (building / "model.engine").write_bytes(b"x" * 200)
    past = time.time() - 60
    os.utime(tmp_path / "tensorrt-old", (past, past))
    source = tmp_path.parent / f"{tmp_path.name}-source.bin"
    source.write_bytes(b"y" * 100)

    cache.put("onnx", "new", ".onnx", source)  # 300 bytes in all: the oldest goes

    assert _entries(cache) == ["onnx-new.onnx"]
