"""The artifact store on real small disks: whole models or none, and folders checked for writes."""

from __future__ import annotations

import errno
import io

import pytest
from disks import FILLER, fill, tmpfs

from automl.errors import SpecError
from automl.settings import Settings
from automl.storage.artifacts import disk_full, require_writable
from automl.storage.factory import open_artifact_store


def test_a_model_that_does_not_fit_leaves_no_file_behind(tmp_path):
    with tmpfs(tmp_path / "art", size_kb=256) as folder:
        store = open_artifact_store(Settings(artifacts_dir=folder))
        store.write("small", io.BytesIO(b"x" * 1000))
        with pytest.raises(OSError) as raised:
            store.write("large", io.BytesIO(b"x" * 1024 * 1024))
        assert raised.value.errno == errno.ENOSPC
        assert sorted(p.name for p in folder.iterdir()) == ["small"]  # no partial, no temp
        assert store.open_reader("small").read() == b"x" * 1000


def test_a_read_only_folder_is_refused_in_one_line(tmp_path):
    folder = tmp_path / "art"
    with tmpfs(folder, size_kb=64, read_only=True), pytest.raises(SpecError) as raised:
        require_writable(folder, "AUTOML_ARTIFACTS_DIR")
    assert str(raised.value) == (
        f"artifacts folder {str(folder)!r} cannot be written: Read-only file system; "
        "give a writable AUTOML_ARTIFACTS_DIR"
    )


def test_a_full_folder_is_refused(tmp_path):
    with tmpfs(tmp_path / "art", size_kb=64) as folder:
        fill(folder, leave_kb=0)
        with pytest.raises(SpecError, match="cannot be written: No space left on device"):
            require_writable(folder, "AUTOML_ARTIFACTS_DIR")
        assert sorted(p.name for p in folder.iterdir()) == [FILLER]  # the probe is gone


@pytest.mark.parametrize("where", ["file", "under_a_file"])
def test_a_folder_that_cannot_be_made_is_refused(tmp_path, where):
    (tmp_path / "file").write_text("")
    folder = tmp_path / "file" if where == "file" else tmp_path / "file" / "artifacts"
    with pytest.raises(SpecError, match=r"cannot be written: .*; give a writable X$"):
        require_writable(folder, "X")


def test_a_missing_folder_is_checked_and_left_missing(tmp_path):
    require_writable(tmp_path / "a" / "b", "X")  # a command refused later leaves nothing
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "a").mkdir()
    require_writable(tmp_path / "a", "X")
    assert list((tmp_path / "a").iterdir()) == []  # what was there stays, empty


def test_a_full_disk_is_told_from_other_errors():
    full = OSError(errno.ENOSPC, "No space left on device")
    try:
        raise RuntimeError("export failed") from full
    except RuntimeError as e:
        assert disk_full(e)
    assert disk_full(RuntimeError("write: Disk quota exceeded"))  # a C++ library's message
    assert not disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not disk_full(ValueError("bad shape"))


def test_a_folder_that_became_read_only_counts_as_a_full_disk(tmp_path):
    with tmpfs(tmp_path / "art", size_kb=64, read_only=True) as folder:
        store = open_artifact_store(Settings(artifacts_dir=folder))
        with pytest.raises(OSError) as raised:
            store.write("model", io.BytesIO(b"x"))
    assert raised.value.errno == errno.EROFS
    assert disk_full(raised.value)  # every write of this host's fails alike: the worker stops
    assert disk_full(RuntimeError("open: Read-only file system"))  # a C++ library's message
