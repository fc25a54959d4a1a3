"""The GPU install (`make install-gpu`) resolves to the ONNX Runtime and onnx the tests run."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _pin(constraints: str, name: str) -> str:
    text = (ROOT / constraints).read_text()
    found = re.search(rf"^{re.escape(name)}==(\S+)$", text, re.MULTILINE)
    assert found, f"{constraints} pins no {name}"
    return found.group(1)


def test_the_cpu_and_gpu_installs_pin_one_onnx_runtime_and_the_tests_run_it() -> None:
    cpu, gpu = (
        _pin("constraints.txt", "onnxruntime"),
        _pin("constraints-gpu.txt", "onnxruntime-gpu"),
    )

    assert cpu == gpu == ort.__version__


def test_onnx_saves_graphs_at_an_ir_version_onnx_runtime_reads() -> None:
    # onnx 1.23 saves at IR 14, which ONNX Runtime 1.31 refuses ("max supported IR version: 13").
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])
    graph = onnx.helper.make_graph([onnx.helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])

    assert model.ir_version == onnx.IR_VERSION
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.slow
def test_the_gpu_install_resolves_to_one_onnx_runtime_on_cuda_13(tmp_path) -> None:
    # make install-gpu's own pip command, resolved by pip (from PyPI) without installing it.
    planned = subprocess.run(
        ["make", "-n", "install-gpu"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    command = shlex.split(next(line for line in planned.splitlines() if "constraints-gpu" in line))
    assert command[1:2] == ["install"], command
    report = tmp_path / "report.json"
    dry_run = ["--dry-run", "--ignore-installed", "--report", str(report)]
    done = subprocess.run(
        [*command[:2], *dry_run, *command[2:]],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    offline = ("Failed to establish a new connection", "Temporary failure in name resolution")
    if done.returncode != 0 and any(words in done.stderr for words in offline):
        pytest.skip(f"pip cannot reach its index here: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-2000:]
    resolved = {
        item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }

    assert resolved["onnxruntime-gpu"] == ort.__version__  # the version the tests run
    assert resolved["onnx"] == onnx.__version__  # whose IR version that runtime reads
    assert resolved["nvidia-cublas"].startswith("13.")  # CUDA 13, as torch 2.13's own
    assert "nvidia-cudnn-cu13" in resolved
    assert resolved["torch"].split("+")[0] == "2.13.0"


@pytest.mark.skipif(
    "CUDAExecutionProvider" not in ort.get_available_providers(),
    reason="needs the GPU build: make test-gpu-build runs it",
)
def test_the_gpu_build_starts_its_providers_or_stops_at_the_driver() -> None:
    # Its libraries load from pip's wheels: on a host without a GPU, only the driver's is missing,
    # never cuBLAS, cuDNN or an IR version the runtime refuses.
    import importlib.util

    from automl.targets.nvidia_smi import detect_gpu_names
    from automl.targets.presence import DRIVER_LIBRARY, provider_failure

    gpus = detect_gpu_names()
    cuda, trt = (
        provider_failure(p) for p in ("CUDAExecutionProvider", "TensorrtExecutionProvider")
    )
    if gpus:
        assert cuda is None
    else:
        assert cuda.startswith(DRIVER_LIBRARY) and "driver" in cuda, cuda
    if importlib.util.find_spec("tensorrt_libs") is None:
        assert trt.startswith("libnvinfer.so.10"), trt  # the tensorrt extra brings it
    elif gpus:
        assert trt is None
    else:
        assert not any(lib in trt for lib in ("libnvinfer", "libcublas", "libcudnn")), trt
