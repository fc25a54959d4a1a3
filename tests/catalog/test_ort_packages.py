"""Two ONNX Runtime builds installed side by side are refused, with the fix in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import onnxruntime as ort
import pytest

from automl.catalog.runtimes._ort_packages import (
    check_single_ort,
    installed_ort_builds,
    require_single_ort,
)
from automl.errors import AutomlError


def test_one_build_passes() -> None:
    check_single_ort(["numpy", "onnxruntime", "onnxruntime-extensions", "torch"])
    check_single_ort(["onnxruntime-gpu", "onnxruntime-genai"])
    check_single_ort([])


def test_cpu_and_gpu_builds_are_refused_keeping_the_gpu_one() -> None:
    with pytest.raises(AutomlError) as info:
        check_single_ort(["numpy", "onnxruntime", "onnxruntime-gpu"])

    message = str(info.value)
    assert "onnxruntime and onnxruntime-gpu are installed together" in message
    fix = "pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu"
    assert fix in message
    assert "make install-gpu" in message


def test_names_are_compared_in_normal_form() -> None:
    assert installed_ort_builds(["ONNXRuntime_GPU", "onnxruntime.gpu", "ort_nightly"]) == [
        "onnxruntime-gpu",
        "ort-nightly",
    ]
    with pytest.raises(AutomlError, match=r"pip install onnxruntime$"):
        check_single_ort(["onnxruntime", "onnxruntime_openvino"])


def test_this_environment_has_one_build() -> None:
    require_single_ort()  # the CPU install: onnxruntime alone


def test_the_check_imports_neither_onnxruntime_nor_torch() -> None:
    code = (
        "import sys; from automl.catalog.runtimes._ort_packages import require_single_ort; "
        "require_single_ort(); "
        "print(sorted(m for m in ('torch', 'onnxruntime') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout

    assert out.strip() == "[]"


def test_gpu_library_versions_are_asked_of_the_loaded_libraries(tmp_path) -> None:
    # Stand-ins for cuDNN 9 and TensorRT 10, with their version functions and encodings, and a
    # pip wheel of another cuDNN beside them: the loaded library is what ran, not the wheel.
    for name, body in [
        ("libcudnn.so.9", "size_t cudnnGetVersion(void) { return 91801; }"),
        ("libnvinfer.so.10", "int getInferLibVersion(void) { return 101601; }"),
    ]:
        (tmp_path / "lib.c").write_text(f"#include <stddef.h>\n{body}\n")
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-o", str(tmp_path / name), str(tmp_path / "lib.c")],
            check=True,
        )
    wheel = tmp_path / "nvidia_cudnn_cu13-9.13.0.50.dist-info"
    wheel.mkdir()
    (wheel / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: nvidia-cudnn-cu13\nVersion: 9.13.0.50\n"
    )
    code = (
        "import ctypes, json, sys\n"
        "from automl.catalog.runtimes._ort_packages import gpu_runtime_versions\n"
        "before = gpu_runtime_versions()\n"
        "for name in sys.argv[2:]: ctypes.CDLL(sys.argv[1] + '/' + name, mode=ctypes.RTLD_GLOBAL)\n"
        "print(json.dumps([before, gpu_runtime_versions()]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), "libcudnn.so.9", "libnvinfer.so.10"],
        capture_output=True, text=True, check=True, env=env,
    ).stdout  # fmt: skip
    before, after = json.loads(out)

    assert (before["cudnn"], before["tensorrt"]) == (None, None)  # nothing loaded yet
    assert (after["cudnn"], after["tensorrt"]) == ("9.18.1", "10.16.1")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        assert after["cuda"] is None  # a CPU build was built for no CUDA


def test_tensorrt_libraries_come_from_the_wheel_libnvinfer_first(tmp_path, monkeypatch) -> None:
    from automl.catalog.runtimes._ort_packages import tensorrt_libraries

    package = tmp_path / "tensorrt_libs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in ("libnvinfer_plugin.so.10", "libnvinfer.so.10", "libnvonnxparser.so.10"):
        (package / name).write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert [p.name for p in tensorrt_libraries()] == ["libnvinfer.so.10", "libnvinfer_plugin.so.10"]


def test_a_cpu_build_loads_no_gpu_library() -> None:
    from automl.catalog.runtimes._ort_packages import load_gpu_libraries

    assert load_gpu_libraries() == ()
