"""A dataset file cannot take more memory than ``AUTOML_DATA_MAX_MB``, and a damaged or crafted
one is refused in one line: crafted headers, deflate bombs, corrupt data and symlink loops."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from crafted import append_member, crafted_headers_npz, damaged_npz, duplicated_npz

from api.errors import ApiError
from api.policy import check_spec
from automl.errors import DataError
from automl.inputs.data import load_dataset
from automl.search.spec import parse_spec
from automl.settings import Settings

CAP_MB = 200
# Loads the dataset argv[1] under the cap argv[2], then prints what it said and its peak
# resident kB. The peak is reset first: a forked child starts with its parent's.
_CHILD = """
import os, sys
open('/proc/self/clear_refs', 'w').write('5')
os.environ['AUTOML_DATA_MAX_MB'] = sys.argv[2]
from automl.errors import DataError
from automl.inputs.data import load_dataset
try:
    print('loaded', load_dataset(sys.argv[1]).x_train.shape)
except DataError as e:
    print(e)
print(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])
"""


def _load_in_a_child(path, cap_mb: float = CAP_MB) -> tuple[str, float]:
    """What loading ``path`` said in a fresh process, and that process's peak memory in MB."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, path.name, str(cap_mb)],
        cwd=path.parent, env=os.environ, capture_output=True, text=True, check=True,
    )  # fmt: skip
    said, peak_kb = done.stdout.strip().splitlines()
    return said, int(peak_kb) / 1000


@pytest.fixture(scope="module")
def honest_train(tmp_path_factory):
    """A 2 MB .npz whose honest x_train holds 420 MB, over twice the cap: were it decompressed,
    the peak would show it."""
    path = tmp_path_factory.mktemp("honest") / "train.npz"
    crafted_headers_npz(path, {"x_train": ((2_100_000, 50), "<f4", 420_000_000)}, level=1)
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("key", "shape", "descr", "message"),
    [
        ("class_names", (-(10**9),), "<U1", r"class_names .* the shape \(-1000000000,\) in"),
        ("x_val", (-(10**9), 50), "<f4", r"x_val .* has the shape \(-1000000000, 50\) in"),
        # numpy's product of these wraps around to -2**62: the old total went down by 2**64.
        ("class_names", (2**62, 3), "<U1", r"class_names .* holds 0 bytes, but its header says"),
        ("vocab_size", (2**62, 3), "<i8", r"vocab_size .* holds 0 bytes, but its header says"),
    ],
)
def test_no_header_hides_an_array_from_the_cap(tmp_path, honest_train, key, shape, descr, message):
    path = shutil.copy(honest_train, tmp_path / "f.npz")
    append_member(path, key, shape, descr)  # after x_train: numpy reads that first
    said, peak_mb = _load_in_a_child(path)
    assert re.match(message, said) and "damaged or crafted" in said, said
    assert peak_mb < 2 * CAP_MB, said  # x_train alone would be 420 MB


@pytest.mark.slow
def test_an_array_in_two_members_is_refused_before_either_is_decompressed(tmp_path):
    duplicated_npz(tmp_path / "dup.npz")  # numpy reads the 150 MB x_train, not x_train.npy
    said, peak_mb = _load_in_a_child(tmp_path / "dup.npz")
    assert said == (
        "dataset 'dup.npz' holds two arrays named x_train (x_train and x_train.npy): write it "
        "again with numpy.savez"
    )
    assert peak_mb < 2 * CAP_MB, said  # as float32, the pixels alone are 600 MB


@pytest.mark.parametrize(
    ("shape", "size", "message"),
    [
        # Numpy would read the 2,000 bytes the header says, and ignore the rest.
        ((10, 50), 1_000_000, r"holds 1000000 bytes, but its header says \(10, 50\) of float32 "
         r"\(2000 bytes\); the file is damaged or crafted: write it again with numpy.savez"),
        ((1000, 50), 100, r"holds 100 bytes, but its header says \(1000, 50\) of float32"),
    ],
)  # fmt: skip
def test_a_header_that_lies_about_its_data_is_refused(tmp_path, shape, size, message):
    crafted_headers_npz(tmp_path / "lie.npz", {"x_train": (shape, "<f4", size)})
    with pytest.raises(DataError, match=rf"x_train of '.*lie.npz' {message}"):
        load_dataset(str(tmp_path / "lie.npz"))


def _pixels(path, rows: int) -> None:
    """A small .npz of ``rows`` x 1,000 uint8 pixels of train (zeros, deflated), two classes,
    and 1,000 rows of test."""
    labels = {"y_train": (np.arange(rows) % 2).astype(np.int8)}
    labels["y_test"] = labels["y_train"][:1000]
    crafted_headers_npz(path, {
        "x_train": ((rows, 1000), "|u1", rows * 1000),
        "x_test": ((1000, 1000), "|u1", 1000 * 1000),
    }, labels, level=1)  # fmt: skip


@pytest.mark.slow
def test_the_cap_bounds_the_memory_a_load_takes_not_the_files_bytes(tmp_path):
    _pixels(tmp_path / "pixels.npz", 191_000)  # 192 MB of arrays: under the cap as bytes
    assert (tmp_path / "pixels.npz").stat().st_size < 2_000_000
    said, peak_mb = _load_in_a_child(tmp_path / "pixels.npz")
    assert said.startswith("the arrays of 'pixels.npz' take 192 MB once decompressed and "), said
    assert "MB of memory to load (features as float32" in said, said
    assert peak_mb < 2 * CAP_MB, said  # as float32 alone the pixels are 764 MB


@pytest.mark.slow
def test_a_file_just_under_the_cap_loads_within_twice_the_cap(tmp_path):
    _pixels(tmp_path / "near.npz", 36_000)  # 37 MB of arrays, which the load holds in 182 MB
    said, _ = _load_in_a_child(tmp_path / "near.npz", cap_mb=0.85 * CAP_MB)
    assert "MB of memory to load" in said, said  # just under the cap, not far below it
    said, peak_mb = _load_in_a_child(tmp_path / "near.npz")
    assert said == "loaded (30600, 1000)", said
    assert peak_mb < 2 * CAP_MB  # Python, numpy and scikit-learn take 150 MB of it


# Two threads load argv[1] at once, as the REST service checks two submissions, each dropping
# its dataset once loaded; prints the process's peak resident kB.
_TWO_AT_ONCE = """
import os, sys, threading
open('/proc/self/clear_refs', 'w').write('5')
os.environ['AUTOML_DATA_MAX_MB'] = sys.argv[2]
from automl.inputs.data import load_dataset
threads = [threading.Thread(target=load_dataset, args=(sys.argv[1],)) for _ in range(2)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])
"""


@pytest.mark.slow
def test_two_loads_at_once_stay_within_twice_the_cap(tmp_path):
    _pixels(tmp_path / "near.npz", 36_000)  # one load holds 182 MB: two at once, over 2 x cap
    done = subprocess.run(
        [sys.executable, "-c", _TWO_AT_ONCE, "near.npz", str(CAP_MB)],
        cwd=tmp_path, env=os.environ, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert int(done.stdout) / 1000 < 2 * CAP_MB, done.stdout


@pytest.mark.parametrize(
    ("damage", "at", "message"),
    [
        ("deflate", 0.0, "Error -3 while decompressing data: invalid block type"),  # its header
        ("deflate", 0.5, "Error -3 while decompressing data: invalid distance too far back"),
        ("lzma", 0.5, "Corrupt input data"),
        ("encrypted", 0, "File <ZipInfo filename='x_train.npy' .* is encrypted, password required"),
    ],
)
def test_damaged_compressed_data_is_a_data_error(tmp_path, damage, at, message):
    damaged_npz(tmp_path / "bad.npz", damage, at)
    with pytest.raises(DataError, match=rf"file '.*bad.npz' is not a readable \.npz: {message}"):
        load_dataset(str(tmp_path / "bad.npz"))


def test_a_symlink_loop_is_a_data_error(tmp_path):
    (tmp_path / "loop.npz").symlink_to("loop.npz")
    said = "dataset file 'loop.npz' cannot be opened: it is a symlink loop; name the .npz file"
    with pytest.raises(DataError, match=re.escape(said)):
        load_dataset(str(tmp_path / "loop.npz"), name="loop.npz")


def test_a_symlink_loop_under_the_data_root_is_refused_by_the_rest_policy(tmp_path):
    (tmp_path / "a.npz").symlink_to("b.npz")
    (tmp_path / "b.npz").symlink_to("a.npz")
    with pytest.raises(ApiError) as refused:
        check_spec(parse_spec({"dataset": "a.npz"}), Settings(data_root=tmp_path))
    assert refused.value.status == 422 and refused.value.field == "dataset"
    assert refused.value.message == "dataset 'a.npz' is a symlink loop: name the file itself"


def test_the_cli_says_a_damaged_file_in_one_line_and_exits_2(cli):
    damaged_npz(cli.root / "bad.npz", "deflate")
    (cli.root / "loop.npz").symlink_to("loop.npz")
    for name, said in (("bad.npz", "not a readable .npz"), ("loop.npz", "symlink loop")):
        out = cli("study", "start", "--dataset", name, check=False)  # checked here, then run
        assert out.returncode == 2 and said in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
