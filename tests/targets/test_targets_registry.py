from __future__ import annotations

import subprocess
import sys

import pytest

from automl.errors import SpecError, TargetUnavailable
from automl.targets import (
    Target,
    detect_gpu_names,
    is_present,
    list_targets,
    load_target,
    require_present,
)

NAMES = ["a100", "cpu", "h100", "h200", "rtx4090"]


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
            assert target.device_match
            assert target.execution_providers[0] == "CUDAExecutionProvider"
            assert target.peaks.flops["fp16"] > target.peaks.flops["fp32"] > 1e12
            assert target.peaks.memory_bandwidth_gbs > 500
            assert target.peaks.memory_gb >= 24


def test_cpu_target_is_measured_host() -> None:
    cpu = load_target("cpu")

    assert cpu.kind == "cpu"
    assert cpu.execution_providers == ("CPUExecutionProvider",)
    assert cpu.device_match is None
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


def test_cpu_is_always_present() -> None:
    cpu = load_target("cpu")

    assert is_present(cpu)
    require_present(cpu)


def test_gpu_presence_matches_device_name_case_insensitively() -> None:
    rtx = load_target("rtx4090")

    assert is_present(rtx, ["NVIDIA GeForce rtx 4090"])
    assert not is_present(rtx, ["NVIDIA A100-SXM4-80GB"])
    assert not is_present(rtx, [])


@pytest.mark.skipif(
    any("a100" in g.lower() for g in detect_gpu_names()), reason="an A100 is present"
)
def test_absent_gpu_raises_with_instructions() -> None:
    with pytest.raises(TargetUnavailable) as excinfo:
        require_present(load_target("a100"))

    message = str(excinfo.value)
    assert "A100" in message
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
