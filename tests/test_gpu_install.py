"""The GPU install (`make install-gpu`) resolves to the ONNX Runtime and onnx the tests run."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
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


RESOLVE = Path(
    tempfile.gettempdir(),
    f"automl-gpu-resolve-{os.environ.get('PYTEST_XDIST_TESTRUNUID') or os.getpid()}",
)


def _install_gpu_command() -> list[str]:
    """make install-gpu's own pip command."""
    planned = subprocess.run(
        ["make", "-n", "install-gpu"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return shlex.split(next(line for line in planned.splitlines() if "constraints-gpu" in line))


def start_gpu_resolve() -> None:
    """Start make install-gpu's own pip command, resolved from PyPI without installing, in the
    background, once per test run (test processes share ``RESOLVE``): it spends most of its
    ~40 s waiting on the index, while the other tests run."""
    try:
        RESOLVE.mkdir()
    except FileExistsError:
        return
    command = _install_gpu_command()
    dry_run = ["--dry-run", "--ignore-installed", "--report", str(RESOLVE / "report.json")]
    shell = f"{shlex.join([*command[:2], *dry_run, *command[2:]])} 2>{RESOLVE}/err"
    shell += f"; echo $? >{RESOLVE}/rc.tmp; mv {RESOLVE}/rc.tmp {RESOLVE}/rc"
    subprocess.Popen(["sh", "-c", shell], cwd=ROOT, stdout=subprocess.DEVNULL)


def _resolved(timeout_s: float) -> tuple[int, str, dict | None]:
    """The exit status, stderr and report of the resolve :func:`start_gpu_resolve` started."""
    start_gpu_resolve()  # when run without the collection hook (conftest) that starts it
    deadline = time.monotonic() + timeout_s
    while not (RESOLVE / "rc").exists():
        assert time.monotonic() < deadline, "pip's resolve did not end"
        time.sleep(0.5)
    report = RESOLVE / "report.json"
    done = int((RESOLVE / "rc").read_text()), (RESOLVE / "err").read_text()
    done += (json.loads(report.read_text()) if report.exists() else None,)
    shutil.rmtree(RESOLVE)
    return done


@pytest.mark.slow
@pytest.mark.background.with_args(start_gpu_resolve)
def test_the_gpu_install_resolves_to_one_onnx_runtime_on_cuda_13() -> None:
    command = _install_gpu_command()
    assert command[1:2] == ["install"], command
    returncode, stderr, report = _resolved(600)
    offline = ("Failed to establish a new connection", "Temporary failure in name resolution")
    if returncode != 0 and any(words in stderr for words in offline):
        pytest.skip(f"pip cannot reach its index here: {stderr[-300:]}")
    assert returncode == 0, stderr[-2000:]
    resolved = {
        item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
        for item in report["install"]
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
