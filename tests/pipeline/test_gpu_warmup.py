"""A GPU warms up by time until its runs settle, and its state is read around a measurement."""

from __future__ import annotations

import itertools
import os
import time

import pytest

from automl.pipeline.gpu_warmup import gpu_state, warm_up_by_time


def _ramping(ramp_s: float):
    """Runs that start 10x slower and reach their speed after ``ramp_s``: clocks ramping up."""
    start = time.perf_counter()

    def run_once() -> float:
        left = max(0.0, 1 - (time.perf_counter() - start) / ramp_s)
        time.sleep(0.0005)
        return 0.05 * (1 + 9 * left)

    return run_once


def test_a_ramping_gpu_is_warmed_up_past_its_ramp_until_runs_settle() -> None:
    warm = warm_up_by_time(_ramping(1.5), min_seconds=0.5, window_seconds=0.1)
    assert warm["settled"] and warm["seconds"] >= 1.5  # not 10 runs: well past the ramp
    assert warm["last_window_p50_ms"] == pytest.approx(0.05, rel=0.05)


def test_warm_up_lasts_its_minimum_even_when_steady_and_stops_at_its_cap() -> None:
    steady = warm_up_by_time(lambda: 1.0, min_seconds=0.3, window_seconds=0.05)
    assert steady["settled"] and steady["seconds"] >= 0.3
    noisy = itertools.cycle([1.0, 3.0, 1.0, 1.0, 5.0, 9.0])
    capped = warm_up_by_time(lambda: next(noisy), min_seconds=0.1, max_seconds=0.3,
                             window_seconds=0.0)  # fmt: skip
    assert capped["seconds"] >= 0.3


def test_the_state_of_this_process_gpu_is_read_from_nvidia_smi(monkeypatch, tmp_path) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        "  --query-gpu=index,uuid,name) printf '0, GPU-a, NVIDIA H100 80GB HBM3\\n"
        "1, GPU-b, NVIDIA H100 80GB HBM3\\n' ;;\n"
        "  *) printf '0, 1980 MHz, 2619 MHz, P0, 41, 120.5 W\\n"
        "1, 345 MHz, 1593 MHz, P8, 33, 70.1 W\\n' ;;\n"
        "esac\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-b")
    assert gpu_state() == {
        "clocks.sm": "345 MHz", "clocks.mem": "1593 MHz", "pstate": "P8",
        "temperature.gpu": "33", "power.draw": "70.1 W",
    }  # fmt: skip
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi: a CPU host
    assert gpu_state() is None
