from __future__ import annotations

import pytest

from automl.catalog import BACKENDS, CPU, CUDA, METHODS, TRT, first_running, get_backend
from automl.errors import SpecError


def test_every_backend_runs_known_methods_on_known_devices() -> None:
    for backend in BACKENDS.values():
        assert set(backend.methods) <= set(METHODS)
        assert backend.device in ("cpu", "cuda")
        assert backend.on_device == (backend.device == "cuda")


def test_fp32_is_never_a_tensorrt_method() -> None:
    # TensorRT builds fp32 layers as TF32 by default: its "fp32" would not be fp32.
    with pytest.raises(SpecError, match="runtime 'ort-tensorrt' does not run method 'fp32'"):
        get_backend("ort-tensorrt").provider_options("fp32")


def test_the_cpu_backend_takes_onnx_runtime_s_defaults() -> None:
    assert get_backend("ort-cpu").provider_options("int8-dynamic", cuda_graph=True) == {}


def test_the_cuda_backend_runs_fp32_without_tf32() -> None:
    cuda = get_backend("ort-cuda")

    assert cuda.provider_options("fp32") == {CUDA: {"use_tf32": "0"}}
    assert cuda.provider_options("fp16", cuda_graph=True) == {
        CUDA: {"use_tf32": "0", "enable_cuda_graph": "1"}
    }


@pytest.mark.parametrize(
    ("method", "flags"),
    [
        ("fp16", {"trt_fp16_enable": "True"}),
        # Explicit QDQ is compiled as written; the layers outside Q/DQ pairs may run in fp16.
        ("int8-trt", {"trt_int8_enable": "True", "trt_fp16_enable": "True"}),
        ("fp8-trt", {"trt_fp16_enable": "True"}),
    ],
)
def test_tensorrt_builds_each_method_with_its_flags_and_caches_engines(tmp_path, method, flags):
    options = get_backend("ort-tensorrt").provider_options(method, tmp_path, cuda_graph=True)

    assert list(options) == [TRT, CUDA]  # CUDA takes what TensorRT cannot, and is then refused
    caches = {
        "trt_engine_cache_enable": "True",
        "trt_engine_cache_path": str(tmp_path),
        "trt_timing_cache_enable": "True",
        "trt_timing_cache_path": str(tmp_path),
    }
    assert options[TRT] == {**flags, "trt_cuda_graph_enable": "True", **caches}
    assert options[CUDA] == {"use_tf32": "0"}
    assert "trt_engine_cache_enable" not in get_backend("ort-tensorrt").provider_options(method)


def test_a_method_runs_on_the_first_backend_that_declares_it() -> None:
    gpu = ("ort-cuda", "ort-tensorrt")

    assert first_running(gpu, "fp16").name == "ort-cuda"
    assert first_running(("ort-tensorrt", "ort-cuda"), "fp16").name == "ort-tensorrt"
    assert first_running(gpu, "int8-trt").providers == (TRT, CUDA)
    assert first_running(gpu, "int8-dynamic") is None
    assert first_running(("ort-cpu",), "fp32").provider == CPU


def test_an_unknown_backend_lists_the_known_ones() -> None:
    with pytest.raises(SpecError, match=r"unknown runtime 'ort-fpga'; known: .*ort-cpu"):
        get_backend("ort-fpga")


@pytest.mark.parametrize(
    ("backend", "reported", "runs"),
    [
        # The option the session was asked for is not evidence: only what it reports is.
        ("ort-cuda", {CUDA: {"enable_cuda_graph": "1", "use_tf32": "0"}}, True),
        ("ort-cuda", {CUDA: {"enable_cuda_graph": "0", "use_tf32": "0"}}, False),
        ("ort-cuda", {CPU: {}}, False),
        ("ort-tensorrt", {TRT: {"trt_cuda_graph_enable": "1"}, CUDA: {}}, True),
        ("ort-tensorrt", {TRT: {"trt_cuda_graph_enable": "0"}, CUDA: {}}, False),
        ("ort-cpu", {CPU: {}}, False),
    ],
)
def test_a_cuda_graph_is_read_from_the_session_s_own_options(
    backend: str, reported: dict, runs: bool
) -> None:
    assert get_backend(backend).runs_cuda_graph(reported) is runs


def test_a_cpu_session_never_reports_a_cuda_graph() -> None:
    import onnxruntime as ort

    from automl.targets.presence import probe_model

    session = ort.InferenceSession(probe_model(), providers=[CPU])
    assert not get_backend("ort-cuda").runs_cuda_graph(session.get_provider_options())
