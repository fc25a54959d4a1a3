"""The prepared GPU check, run where no GPU is: it must still check the recipes, and say so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnxruntime as ort
import pytest

# The device script, run as a command: end to end (not in make test-fast).
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(), reason="a GPU build: run it there"
)
def test_without_a_gpu_it_checks_the_recipes_on_the_cpu_and_exits_2(tmp_path, zygote) -> None:
    out = tmp_path / "gpu_check.json"
    args = ["-m", "bench.gpu_check", "--no-study", "--out", str(out)]
    done = zygote.python(args, cwd=ROOT, env=dict(os.environ), timeout=300)  # forked: no imports

    assert out.exists(), done.stdout + done.stderr
    report = json.loads(out.read_text())
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert done.returncode == 2 == report["exit_status"], done.stdout + done.stderr
    assert "fail" not in status.values(), report["checks"]
    assert status["TensorrtExecutionProvider starts"] == "missing"
    assert status["int8-trt-mixed on TensorrtExecutionProvider"] == "missing"
    methods = {row["method"] for row in report["methods"]}
    assert methods == {"fp32", "fp16", "int8-trt", "fp8-trt"}  # every recipe, on the CPU
    assert report["environment"]["trial_versions"].keys() == {"cuda", "cudnn", "tensorrt"}
    # The reference is the graph as written: int8-trt within its bound of fp32, as TensorRT
    # computes it, not the CPU's fused int8 kernels (0.59 against 0.91 on a CPU without VNNI).
    as_written = {row["method"]: row["accuracy_as_written"] for row in report["methods"]}
    assert abs(as_written["int8-trt"] - as_written["fp32"]) <= 0.02, as_written


def test_a_machine_without_a_dependency_is_missing_it_not_failing(tmp_path) -> None:
    # As on a lent GPU machine whose image lacks scikit-learn: nothing about the GPU is known.
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "sklearn.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'sklearn'\")\n"
    )
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "PYTHONPATH": f"{blocked}{os.pathsep}{ROOT}"}
    done = subprocess.run(
        [sys.executable, "-m", "bench.gpu_check", "--no-study", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip

    status = {c["name"]: c["status"] for c in json.loads(out.read_text())["checks"]}
    assert status["gpu_check"] == "missing" and done.returncode == 2, done.stdout + done.stderr
