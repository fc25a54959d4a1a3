"""examples/make_example_data.py writes, in a second or two, one dataset per shipped space."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from automl.inputs.data import load_dataset
from automl.search.compat import check_compatible
from automl.search.space import load_space
from automl.targets import load_target

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "make_example_data.py"


def test_each_example_file_fits_its_space(tmp_path):
    command = [sys.executable, str(SCRIPT), "--out", str(tmp_path / "data")]
    subprocess.run(command, cwd=tmp_path, check=True, capture_output=True, timeout=60)
    layouts = {
        "signals-cnn": ("signals", np.float32, (1, 64)),
        "images-resnet": ("images", np.uint8, (3, 32, 32)),
        "text-transformer": ("tokens", np.int64, (16,)),
    }
    for space, (name, dtype, shape) in layouts.items():
        path = tmp_path / "data" / f"{name}.npz"
        with np.load(path) as arrays:
            assert arrays["x_train"].dtype == dtype and arrays["x_train"].shape[1:] == shape
        data = load_dataset(str(path))
        check_compatible(load_space(space), data, load_target("cpu"))
    assert load_dataset(str(tmp_path / "data" / "tokens.npz")).vocab_size == 32
