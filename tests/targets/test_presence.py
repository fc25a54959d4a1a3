"""Whether a provider starts here: the one-node probe every GPU presence check runs."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from automl.targets.presence import provider_starts


def test_a_provider_counts_only_once_a_session_starts_on_it() -> None:
    # TensorRT's provider loads libnvinfer only when a session starts; one that cannot start
    # leaves the session on another provider or raises, and is not counted.
    assert provider_starts("CPUExecutionProvider")
    assert not provider_starts("NoSuchExecutionProvider")
    if "TensorrtExecutionProvider" not in ort.get_available_providers():
        assert not provider_starts("TensorrtExecutionProvider")


def test_the_probe_graph_is_in_an_ir_version_every_supported_runtime_reads() -> None:
    import onnx

    from automl.targets.presence import PROBE_IR_VERSION, probe_model

    model = onnx.load_from_string(probe_model())
    assert model.ir_version == PROBE_IR_VERSION <= 13  # ORT-GPU 1.31 reads IR 13 at most
    assert ort.InferenceSession(probe_model()).run(None, {"x": np.ones((1, 8), np.float32)})


def test_a_provider_that_does_not_start_says_why() -> None:
    from automl.targets.presence import provider_failure

    assert provider_failure("CPUExecutionProvider") is None
    why = provider_failure("NoSuchExecutionProvider")
    assert why and "IR version" not in why and "libcublas" not in why


# What onnxruntime-gpu 1.31.1 printed, with pip's CUDA 13 wheels installed, on a host without
# an NVIDIA driver (CUDA) and without TensorRT's wheels (TensorRT); colour codes as printed.
CUDA_STDERR = (
    "\x1b[1;31m2026-12-06 21:47:07.324779487 [E:onnxruntime:Default, provider_bridge_ort.cc:2458 "
    "operator()] /onnxruntime_src/onnxruntime/core/session/provider_bridge_ort.cc:2043 "
    "onnxruntime::Provider& onnxruntime::ProviderLibrary::Get() [ONNXRuntimeError] : 1 : FAIL : "
    "Failed to load library /venv/lib/python3.11/site-packages/onnxruntime/capi/"
    "libonnxruntime_providers_cuda.so with error: libcuda.so.1: cannot open shared object file: "
    "No such file or directory\n\x1b[m\n\x1b[0;93m2026-12-06 21:47:07.324849398 "
    "[W:onnxruntime:Default, onnxruntime_pybind_state.cc:1295 "
    "CreateExecutionProviderFactoryInstance] Failed to create CUDAExecutionProvider. Require "
    "cuDNN 9.* and CUDA 13.*. Please install all dependencies as mentioned in the GPU "
    "requirements page, make sure they're in the PATH, and that your GPU is supported.\x1b[m\n"
)
TRT_STDERR = (
    "\x1b[1;31m2026-12-06 21:47:08.706252882 [E:onnxruntime:Default, provider_bridge_ort.cc:2430 "
    "operator()] ... FAIL : Failed to load library /venv/lib/python3.11/site-packages/onnxruntime/"
    "capi/libonnxruntime_providers_tensorrt.so with error: libnvinfer.so.10: cannot open shared "
    "object file: No such file or directory\n\x1b[m\nTraceback (most recent call last):\n"
    "RuntimeError: onnxruntime_pybind_state.cc:729 void onnxruntime::python::"
    "RegisterTensorRTPluginsAsCustomOps(...) Please install TensorRT libraries as mentioned in "
    "the GPU requirements page, make sure they're in the PATH or LD_LIBRARY_PATH, and that your "
    "GPU is supported.\n\n"
)


@pytest.mark.parametrize(
    ("stderr", "reason"),
    [
        (CUDA_STDERR, "libcuda.so.1: cannot open shared object file: No such file or directory "
                      "(the NVIDIA driver's library, which no pip install brings"),
        (TRT_STDERR, "libnvinfer.so.10: cannot open shared object file: No such file or directory"),
        ("\x1b[0;93mSome other failure\x1b[m\n", "Some other failure"),
        ("", "registered another provider"),
    ],
)  # fmt: skip
def test_a_probe_names_the_library_that_did_not_load_not_the_generic_advice(
    stderr: str, reason: str
) -> None:
    from automl.targets.presence import probe_reason

    why = probe_reason(stderr)
    assert why.startswith(reason) and "\x1b" not in why and "Please install" not in why


@pytest.mark.usefixtures("a100_host")
def test_a_gpu_build_whose_provider_cannot_start_is_refused_before_any_work(monkeypatch) -> None:
    # A GPU build lists CUDA on any host; here none starts (no driver, or the CPU build's probe
    # lands on the CPU). The refusal comes before training, with the probe's reason.
    from automl.errors import TargetUnavailable
    from automl.targets import is_present, load_target, require_present

    listed = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    monkeypatch.setattr(ort, "get_available_providers", lambda: listed)
    a100 = load_target("a100")

    assert not is_present(a100)
    with pytest.raises(TargetUnavailable, match="CUDAExecutionProvider failed to start with: "):
        require_present(a100, ["fp32"])
