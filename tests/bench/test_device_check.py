"""The device check: every claim gets a verdict, judged from what the machine answered."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import onnxruntime as ort
import pytest

from bench import device_check as dc

ROOT = Path(__file__).resolve().parents[2]
PCIE, SXM = "GPU-11111111-2222-3333-4444-555555555555", "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
# A mixed host as nvidia-smi lists it (PCI bus order): the PCIe card first.
SMI = [
    f"0, {PCIE}, NVIDIA H100 PCIe, 580.95.05, [N/A], 00000000:17:00.0",
    f"1, {SXM}, NVIDIA H100 80GB HBM3, 580.95.05, [N/A], 00000000:65:00.0",
]


def verdicts_of(v: dc.Verdicts) -> dict[str, str]:
    return {row["claim"]: row["verdict"] for row in v.data["verdicts"]}


@pytest.fixture
def mixed_host(monkeypatch, tmp_path) -> None:
    """`nvidia-smi` on PATH, answering the device check's query for the mixed host."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "nvidia-smi"
    lines = "\n".join(SMI)
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' '{lines}'\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def test_without_a_gpu_every_claim_is_unknown_and_it_exits_2(tmp_path, zygote) -> None:
    out = tmp_path / "device_check.json"
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}  # no nvidia-smi on it
    args = ["-m", "bench.device_check", "--out", str(out), "--budget-s", "60"]
    done = zygote.python(args, cwd=ROOT, env=env, timeout=120)  # forked: no imports to wait on

    report = json.loads(out.read_text())
    claims = {row["claim"]: row["verdict"] for row in report["verdicts"]}
    assert done.returncode == 2 == report["exit_status"], done.stdout + done.stderr
    assert list(claims) == [*dc.LISTING, *dc.IDENTITY, *dc.TIMING, *dc.RUNTIME]
    # A GPU build reads its CUDA libraries' versions without a GPU; nothing else is known.
    read = "HOLDS" if "CUDAExecutionProvider" in ort.get_available_providers() else "UNKNOWN"
    assert claims.pop("runtime_versions_from_loaded_libraries") == read
    assert set(claims.values()) == {"UNKNOWN"}
    assert "[UNKNOWN] nvidia_gpu_listed: nvidia-smi is missing" in done.stdout


def test_a_mixed_host_fails_order_and_target_but_pins_by_uuid(mixed_host, tmp_path) -> None:
    # CUDA lists the faster SXM card first; nvidia-smi lists by PCI bus. A UUID pin holds.
    gpus = dc.nvidia_smi_gpus()
    v = dc.Verdicts(tmp_path / "out.json", 60)
    cuda = {"devices": [{"ordinal": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": SXM},
                        {"ordinal": 1, "name": "NVIDIA H100 PCIe", "uuid": PCIE}]}  # fmt: skip
    pinned = {u: {"devices": [{"ordinal": 0, "name": "-", "uuid": u}]} for u in (PCIE, SXM)}

    dc.judge_listing(v, gpus)
    dc.judge_identity(v, gpus, cuda, pinned, dc._accepted_targets(gpus)())

    assert [g["name"] for g in gpus] == ["NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3"]
    assert verdicts_of(v) == {
        "nvidia_gpu_listed": "HOLDS",
        "driver_runs_cuda_13": "HOLDS",
        "whole_gpu_not_mig": "HOLDS",
        "cuda_names_match_nvidia_smi": "HOLDS",
        "cuda_order_matches_nvidia_smi": "FAILS",
        "pinning_by_uuid_selects_that_gpu": "HOLDS",
        "one_target_accepts_each_gpu": "FAILS",  # no target takes the PCIe card
    }
    assert json.loads(v.data["verdicts"][-1]["evidence"])["NVIDIA H100 80GB HBM3"] == ["h100"]


def test_an_old_driver_mig_and_a_wrong_pin_fail(tmp_path) -> None:
    fields = ("index", "uuid", "name", "driver_version", "mig.mode.current", "pci.bus_id")
    row = ("0", SXM, "NVIDIA H100 80GB HBM3", "575.57.08", "Enabled", "0:65:0.0")
    gpu = dict(zip(fields, row, strict=True))
    v = dc.Verdicts(tmp_path / "out.json", 60)
    cuda = {"devices": [{"ordinal": 0, "name": gpu["name"], "uuid": SXM}]}

    dc.judge_listing(v, [gpu])
    dc.judge_identity(v, [gpu], cuda, {SXM: {"devices": []}}, None)

    verdicts = verdicts_of(v)
    assert verdicts["driver_runs_cuda_13"] == verdicts["whole_gpu_not_mig"] == "FAILS"
    assert verdicts["pinning_by_uuid_selects_that_gpu"] == "FAILS"
    assert verdicts["one_target_accepts_each_gpu"] == "UNKNOWN"  # automl not importable


def test_timing_claims_are_judged_from_the_measurements(tmp_path) -> None:
    def warm(after: float, load: float) -> dict:
        return {"warm_up_s": 1.2, "p50_after_warm_up_ms": after, "p50_after_2s_load_ms": load}

    measurements = {
        "warm_up[mlp_b64]": warm(0.051, 0.050),
        "warm_up_10_runs[mlp_b64]": warm(0.090, 0.050),
        "warm_up[gemm_4096]": warm(3.0, 2.0),  # clocks still rising after the warm-up
        "timing_split[mlp_b64]": {
            "host_timed_p50_ms": 0.05,
            "cuda_event_p50_ms": 0.012,
            "cuda_graph_p50_ms": 0.02,
        },
        "tf32": {
            "off": {"max_rel_error": 1e-7, "p50_ms": 2.0},
            "on": {"max_rel_error": 4e-4, "p50_ms": 0.5},
        },
        "matmul[8192]": {"fp16": 1.4, "fp8": 0.8, "int8": "RuntimeError: not supported"},
        "matmul[digits]": {"fp16": 0.011, "fp8": 0.012, "int8": 0.011},
    }
    v = dc.Verdicts(tmp_path / "out.json", 60)

    dc.judge_timing(v, measurements)

    assert verdicts_of(v) == {
        "warm_up_settles[mlp_b64]": "HOLDS",
        "warm_up_settles[gemm_4096]": "FAILS",
        "cuda_graph_removes_launch_overhead": "HOLDS",
        "tf32_off_is_ieee_fp32": "HOLDS",
        "tf32_changes_fp32_matmul": "HOLDS",
        "fp8_beats_fp16_at_8192": "HOLDS",
        "int8_beats_fp16_at_8192": "UNKNOWN",  # it did not run: no verdict either way
        "precision_shows_at_digits_size": "FAILS",
    }
    assert "after 10 runs only: 1.8" in v.data["verdicts"][0]["evidence"]
    assert v.exit_status() == 1
    assert json.loads((tmp_path / "out.json").read_text())["verdicts"] == v.data["verdicts"]


@pytest.mark.parametrize(("gpu_listed", "verdict"), [(False, "UNKNOWN"), (True, "FAILS")])
def test_a_gpu_build_whose_providers_cannot_load_fails_only_where_a_gpu_is_listed(
    monkeypatch, tmp_path, gpu_listed, verdict
) -> None:
    # onnxruntime-gpu on a host without the driver: both providers listed, neither loads.
    import onnxruntime

    from automl.targets import presence

    listed = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: listed)
    monkeypatch.setattr(presence, "provider_failure", lambda p: f"libcuda.so.1 missing for {p}")
    v = dc.Verdicts(tmp_path / "out.json", 60)

    dc.judge_runtime(v, gpu_listed)

    verdicts = verdicts_of(v)
    assert verdicts["cuda_provider_starts"] == verdicts["tensorrt_provider_starts"] == verdict
    assert verdicts["cuda_graph_reported_by_the_session"] == "UNKNOWN"  # no session to ask
    assert "libcuda.so.1 missing for CUDAExecutionProvider" in v.data["verdicts"][0]["evidence"]
