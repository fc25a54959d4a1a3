from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnxruntime as ort
import pytest

from automl.errors import SpecError, TargetUnavailable
from automl.targets import (
    Target,
    detect_gpu_names,
    device_refusal,
    is_present,
    list_targets,
    load_target,
    matching_gpus,
    require_present,
)
from automl.targets._registry import _parse_target
from automl.targets.nvidia_smi import parse_gpu_identities, parse_gpu_query
from automl.targets.presence import gpu_identity, runtime_refusal

# Every target file shipped, by name: the registry must load each, in this order.
NAMES = sorted(
    p.stem for p in (Path(__file__).resolve().parents[2] / "automl" / "targets").glob("*.yaml")
)


@pytest.mark.parametrize("name", NAMES)
def test_every_target_loads(name: str) -> None:
    target = load_target(name)

    assert isinstance(target, Target)
    assert target.name == name
    assert target.execution_providers
    assert set(target.precisions) <= {32, 16, 8, 4}
    assert target.intra_op_threads == 1
    assert target.peaks.source


def test_list_targets_is_sorted_by_name() -> None:
    assert [t.name for t in list_targets()] == NAMES


def test_gpu_targets_have_datasheet_peaks() -> None:
    for target in list_targets():
        if target.kind == "cuda":
            assert target.device_names
            assert target.execution_providers[0] == "CUDAExecutionProvider"
            assert target.peaks.flops["fp16"] > target.peaks.flops["fp32"] > 1e12
            assert target.peaks.memory_bandwidth_gbs > 500
            assert target.peaks.memory_gb >= 24


def test_cpu_target_is_measured_host() -> None:
    cpu = load_target("cpu")

    assert cpu.kind == "cpu"  # from its runtimes: its YAML names no kind
    assert cpu.backends == ("ort-cpu", "openvino")
    assert cpu.execution_providers == ("CPUExecutionProvider", "OpenVINO:CPU")
    assert cpu.device_names == ()
    assert dict(cpu.peaks.flops) == {}
    assert cpu.peaks.source == "not applicable: measured host"


def test_target_is_frozen() -> None:
    with pytest.raises(AttributeError):
        load_target("cpu").name = "other"  # type: ignore[misc]


def test_unknown_target_lists_known_names() -> None:
    with pytest.raises(SpecError) as excinfo:
        load_target("tpu-v9")

    for name in NAMES:
        assert name in str(excinfo.value)


CPU_METHODS = ("fp32", "fp16", "int8-static", "int8-mixed", "int8-dynamic", "int4-weight")


@pytest.mark.parametrize("name", NAMES)
def test_precisions_are_the_bits_of_the_methods(name: str) -> None:
    target = load_target(name)

    if name == "cpu":
        assert (target.methods, target.precisions) == (CPU_METHODS, (32, 16, 8, 4))
    else:  # fp32 and fp16 on the CUDA provider, 8 bits through TensorRT; no int4 recipe yet
        hopper = ("fp8-trt",) if name in ("h100", "h200") else ()
        assert target.methods == ("fp32", "fp16", "int8-trt", "int8-trt-mixed", *hopper)
        assert target.precisions == (32, 16, 8)


@pytest.mark.parametrize("name", NAMES)
def test_each_method_runs_on_the_first_backend_that_declares_it(name: str) -> None:
    target = load_target(name)
    backends = {m: target.backend_for(m).name for m in target.methods}

    if name == "cpu":
        assert set(backends.values()) == {"ort-cpu"}
    else:
        assert backends["fp32"] == backends["fp16"] == "ort-cuda"
        assert {backends[m] for m in target.methods[2:]} == {"ort-tensorrt"}
        assert target.execution_providers == ("CUDAExecutionProvider", "TensorrtExecutionProvider")
    with pytest.raises(SpecError, match=rf"target '{name}' does not run method 'int3'"):
        target.backend_for("int3")


def _yaml(**changes: object) -> dict:
    """The cpu target's YAML data with ``changes`` (``None`` removes a key)."""
    data = {
        "name": "cpu",
        "kind": "cpu",
        "description": "test",
        "backends": ["ort-cpu"],
        "methods": ["fp32", "int8-static"],
        "intra_op_threads": 1,
        "peaks": {"flops": None, "memory_bandwidth_gbs": None, "memory_gb": None, "source": "x"},
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


@pytest.mark.parametrize(
    ("changes", "methods", "precisions"),
    [
        ({}, ("fp32", "int8-static"), (32, 8)),
        (
            {
                "backends": ["ort-tensorrt"],
                "kind": "cuda",
                "device_names": ["X"],
                "methods": ["int8-trt", "fp16"],
            },
            ("int8-trt", "fp16"),
            (16, 8),
        ),
        (
            {"methods": None, "precisions": [8, 32]},
            ("fp32", "int8-dynamic", "int8-static"),
            (32, 8),
        ),
        ({"precisions": [32, 8]}, ("fp32", "int8-static"), (32, 8)),
    ],
)
def test_methods_and_precisions_load(changes: dict, methods: tuple, precisions: tuple) -> None:
    target = _parse_target(_yaml(**changes), "cpu")

    assert (target.methods, target.precisions) == (methods, precisions)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"methods": ["fp32", "int3"]}, r"unknown: \['int3'\]"),
        ({"methods": ["fp32", "fp32"]}, "must be distinct names among fp32, fp16"),
        ({"methods": []}, "at least 1 item"),
        ({"methods": None}, "list its methods"),
        ({"precisions": [32, 16]}, r"precisions \[32, 16\] differ from the bits of its methods"),
        ({"precisions": [3]}, "precisions"),
        ({"kind": "cuda"}, "a target's runtimes share one device, which is its kind"),
        ({"backends": ["ort-cpu", "ort-cuda"]}, r"run on \['cpu', 'cuda'\]"),
        ({"device_names": ["NVIDIA H200"]}, "device_names is required exactly for kind cuda"),
        (
            {
                "backends": ["ort-cuda"],
                "methods": ["fp32"],
                "kind": None,
                "device_names": ["NVIDIA A100-SXM4-40GB MIG 1g.5gb"],
            },
            "lists a MIG slice",
        ),
        ({"device_match": "A100"}, "Extra inputs are not permitted"),
        ({"execution_providers": ["CPUExecutionProvider"]}, "Extra inputs are not permitted"),
        ({"backends": ["ort-cpu", "ort-fpga"]}, "unknown runtime 'ort-fpga'"),
        ({"backends": ["ort-cuda"], "methods": ["fp32"], "kind": None}, "device_names is required"),
        (
            {"methods": ["fp32", "int8-trt"]},
            r"no backend of \['ort-cpu'\] runs methods \['int8-trt'\]",
        ),
        ({"name": "other"}, "declares name 'other'"),
    ],
)
def test_invalid_target_files_are_refused_at_load(changes: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        _parse_target(_yaml(**changes), "cpu")


def test_cpu_is_always_present() -> None:
    cpu = load_target("cpu")

    assert is_present(cpu)
    require_present(cpu)


def test_gpu_presence_matches_device_name_case_insensitively() -> None:
    rtx = load_target("rtx4090")

    assert is_present(rtx, ["NVIDIA GeForce rtx  4090 "])
    assert not is_present(rtx, ["NVIDIA A100-SXM4-80GB"])
    assert not is_present(rtx, [])


# Real `nvidia-smi --query-gpu=name` names (a MIG slice as CUDA names it), and the one target
# each may measure, or None.
GPU_NAMES = [
    ("NVIDIA A100-SXM4-80GB", "a100"),
    ("NVIDIA A100-SXM4-40GB", None),  # half the memory, 1555 GB/s: not the 80GB part's peaks
    ("NVIDIA A100-PCIE-40GB", None),
    ("NVIDIA A100 80GB PCIe", None),
    ("NVIDIA H100 PCIe", None),
    ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA H200", "h200"),
    ("NVIDIA GH200 480GB", None),  # contains "H200"
    ("NVIDIA RTX A1000", None),  # contains "A100" case-insensitively
    ("NVIDIA GeForce RTX 4090", "rtx4090"),
    ("NVIDIA GeForce RTX 4090 D", None),
    ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", None),  # a slice of a listed model
    ("NVIDIA H100 80GB HBM3 MIG", None),  # as detect_gpu_names reports a GPU in MIG mode
]
GPU_TARGETS = ["a100", "h100", "h200", "rtx4090"]


@pytest.mark.parametrize(("gpu", "expected"), GPU_NAMES)
def test_each_gpu_name_matches_at_most_its_own_target(gpu: str, expected: str | None) -> None:
    matched = [name for name in GPU_TARGETS if is_present(load_target(name), [gpu])]

    assert matched == ([expected] if expected else [])


@pytest.mark.parametrize("gpu", ["NVIDIA A100-SXM4-80GB MIG 1g.10gb", "NVIDIA A100-SXM4-80GB MIG"])
def test_a_mig_slice_of_the_right_model_is_refused_with_the_reason(gpu: str) -> None:
    reason = device_refusal(load_target("a100"), gpu)

    assert reason is not None
    assert "MIG slice, refused" in reason
    assert "whole GPU" in reason


def test_another_model_is_refused_naming_the_accepted_one() -> None:
    reason = device_refusal(load_target("a100"), "NVIDIA RTX A1000")

    assert reason == "'NVIDIA RTX A1000' is not 'NVIDIA A100-SXM4-80GB'"


def test_matching_gpus_keeps_the_matching_names_in_order() -> None:
    gpus = ["NVIDIA H200", "NVIDIA GH200 480GB", "nvidia h200", "NVIDIA H200 MIG 1g.18gb"]

    assert matching_gpus(load_target("h200"), gpus) == ["NVIDIA H200", "nvidia h200"]


def test_nvidia_smi_query_marks_gpus_in_mig_mode() -> None:
    out = (
        "NVIDIA A100-SXM4-80GB, Enabled\n"
        "NVIDIA A100-SXM4-80GB, Disabled\n"
        "NVIDIA GeForce RTX 4090, [N/A]\n"
        "NVIDIA H200\n"
        "\n"
    )

    assert parse_gpu_query(out) == [
        "NVIDIA A100-SXM4-80GB MIG",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA GeForce RTX 4090",
        "NVIDIA H200",
    ]


@pytest.mark.skipif(
    bool(matching_gpus(load_target("a100"), detect_gpu_names())), reason="an A100 is present"
)
def test_absent_gpu_raises_with_instructions() -> None:
    with pytest.raises(TargetUnavailable) as excinfo:
        require_present(load_target("a100"))

    message = str(excinfo.value)
    assert "'NVIDIA A100-SXM4-80GB'" in message
    assert "automl worker --target a100 --storage postgresql://" in message
    assert "never estimated" in message


def test_import_does_not_load_torch_or_onnxruntime() -> None:
    code = (
        "import sys, automl.targets as t; t.list_targets(); "
        "print(sorted(m for m in ('torch', 'onnxruntime') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout

    assert out.strip() == "[]"


def test_nvidia_smi_identities_are_parsed_line_by_line() -> None:
    out = (
        "0, GPU-1f2e, 580.65.06, NVIDIA H100 80GB HBM3, [N/A]\n\n"
        "1, GPU-3c4d, 580.65.06, NVIDIA H200, Enabled\n"
        "2, GPU-5e6f, 535.104.05, NVIDIA GeForce RTX 4090\n"  # a driver without MIG fields
    )

    assert parse_gpu_identities(out) == [
        {"index": "0", "uuid": "GPU-1f2e", "driver": "580.65.06", "name": "NVIDIA H100 80GB HBM3"},
        {"index": "1", "uuid": "GPU-3c4d", "driver": "580.65.06", "name": "NVIDIA H200 MIG"},
        {
            "index": "2",
            "uuid": "GPU-5e6f",
            "driver": "535.104.05",
            "name": "NVIDIA GeForce RTX 4090",
        },
    ]


@pytest.mark.usefixtures("a100_host")
def test_the_gpu_identity_is_the_first_gpu_that_can_measure_the_target():

    assert gpu_identity(load_target("a100")) == {  # the first whole GPU: not the MIG one
        "index": "1",
        "uuid": "GPU-bbbb",
        "driver": "580.65.06",
        "name": "NVIDIA A100-SXM4-80GB",
    }
    assert gpu_identity(load_target("h100")) is None


@pytest.mark.usefixtures("a100_host")
def test_the_gpu_identity_is_this_process_s_gpu_when_cuda_visible_devices_names_it(monkeypatch):
    a100 = load_target("a100")

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbb")
    assert gpu_identity(a100)["index"] == "1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")  # the RTX 4090: not an A100
    assert gpu_identity(a100) is None


def test_a_cuda_target_needs_its_provider_in_onnx_runtime() -> None:
    a100 = load_target("a100")

    assert runtime_refusal(a100, ["CUDAExecutionProvider", "CPUExecutionProvider"]) is None
    assert runtime_refusal(load_target("cpu"), ["CPUExecutionProvider"]) is None
    reason = runtime_refusal(a100, ["CPUExecutionProvider"])
    assert reason is not None and "\n" not in reason
    assert "CUDAExecutionProvider" in reason and "make install-gpu" in reason


def test_int8_and_fp8_need_tensorrt_and_the_refusal_names_its_install() -> None:
    a100, cuda = load_target("a100"), ["CUDAExecutionProvider", "CPUExecutionProvider"]

    assert runtime_refusal(a100, cuda, ["fp32", "fp16"]) is None
    reason = runtime_refusal(a100, cuda, ["fp16", "int8-trt"])
    assert reason is not None and "\n" not in reason
    assert "int8-trt on ONNX Runtime's TensorrtExecutionProvider (backend ort-tensorrt)" in reason
    assert "make install-gpu GPU_EXTRAS=dev,gpu,tensorrt" in reason
    assert runtime_refusal(a100, ["TensorrtExecutionProvider", *cuda], ["int8-trt"]) is None
    assert runtime_refusal(a100, cuda, ["int8-static"]) is None  # the space's check names it


@pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(), reason="onnxruntime-gpu is here"
)
@pytest.mark.usefixtures("a100_host")  # the real (CPU) ONNX Runtime lacks the CUDA provider
def test_a_gpu_host_without_onnxruntime_gpu_is_refused_naming_the_fix():
    a100 = load_target("a100")

    assert is_present(a100, detect_gpu_names())  # the hardware, by name
    assert not is_present(a100)  # the machine: hardware and runtime
    with pytest.raises(TargetUnavailable, match=r"lacks .*: run `make install-gpu`") as excinfo:
        require_present(a100)
    assert "\n" not in str(excinfo.value)


def test_a_runtime_narrows_the_target_to_the_methods_it_runs() -> None:
    cpu = load_target("cpu")
    openvino = cpu.on_runtime("openvino")

    assert openvino.backends == ("openvino",) and openvino.name == "cpu"
    assert openvino.methods == ("fp32", "int8-static", "int8-mixed")
    assert openvino.backend_for("int8-static").name == "openvino"
    assert cpu.backend_for("int8-static").name == "ort-cpu"  # the first runtime, by default
    assert cpu.on_runtime(None) is cpu
    with pytest.raises(SpecError, match="offers the runtimes ort-cpu, openvino, not 'ort-cuda'"):
        cpu.on_runtime("ort-cuda")
    with pytest.raises(SpecError, match="does not run method 'int8-dynamic'"):
        openvino.backend_for("int8-dynamic")
