"""GPUs of the host: listing by `nvidia-smi`, round-robin assignment, the measurement lock."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter

import pytest

from automl.targets import load_target, nvidia_smi
from automl.targets.gpus import (
    VISIBLE,
    Gpu,
    current_gpu,
    list_gpus,
    measurement_lock,
    pin_this_process,
    worker_environment,
)

# `nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader` on a host with four H100s.
UUIDS = [
    "GPU-4b9c6f5e-8a1d-2c3e-9f0a-1b2c3d4e5f60",
    "GPU-7d2e1a0b-3c4d-5e6f-8091-a2b3c4d5e6f7",
    "GPU-c0ffee00-1111-2222-3333-444455556666",
    "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9",
]
SMI_LINES = [f"{i}, {uuid}, NVIDIA H100 80GB HBM3" for i, uuid in enumerate(UUIDS)]
HOST = [Gpu(index=i, uuid=uuid, name="NVIDIA H100 80GB HBM3") for i, uuid in enumerate(UUIDS)]

# Holds measurement_lock on the GPU of its CUDA_VISIBLE_DEVICES, saying when it waits and holds.
HOLDER = """
import sys
from pathlib import Path
from automl.targets.gpus import measurement_lock
from automl.targets import load_target
print("waiting", flush=True)
with measurement_lock(load_target("h100"), lock_dir=Path(sys.argv[1])):
    print("locked", flush=True)
"""


def _fake_nvidia_smi(monkeypatch, tmp_path, body: str) -> None:
    """Put an executable `nvidia-smi` running ``body`` (sh) at the front of PATH."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture
def four_h100(monkeypatch, tmp_path):
    """A host with four H100s, as `nvidia-smi` lists them; other queries fail as on a driver."""
    lines = "\n".join(SMI_LINES)
    _fake_nvidia_smi(
        monkeypatch,
        tmp_path,
        'if [ "$1" = --query-gpu=index,uuid,name ] && [ "$2" = --format=csv,noheader ]; then\n'
        f"  printf '%s\\n' '{lines}'\nelse\n  echo 'Invalid combination' >&2; exit 2\nfi",
    )
    monkeypatch.delenv(VISIBLE, raising=False)


def test_list_gpus_parses_nvidia_smi(four_h100):
    assert list_gpus() == HOST


def test_list_gpus_is_empty_without_a_working_nvidia_smi(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # none at all
    assert list_gpus() == []
    _fake_nvidia_smi(
        monkeypatch,
        tmp_path,
        'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."\n'
        "exit 9",
    )
    assert list_gpus() == []


def test_list_gpus_gives_up_on_a_hung_nvidia_smi(monkeypatch, tmp_path):
    _fake_nvidia_smi(monkeypatch, tmp_path, "exec sleep 30")
    monkeypatch.setattr(nvidia_smi, "_NVIDIA_SMI_TIMEOUT_S", 0.3)
    started = time.monotonic()
    assert list_gpus() == []
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("n_gpus", [1, 2, 3])
@pytest.mark.parametrize("workers", [1, 2, 5])
def test_workers_get_the_gpus_round_robin(n_gpus, workers):
    gpus = HOST[:n_gpus]
    envs = [worker_environment(i, gpus, environ={}) for i in range(workers)]
    assert envs == [{VISIBLE: gpus[i % n_gpus].uuid} for i in range(workers)]
    per_gpu = Counter(env[VISIBLE] for env in envs)
    assert max(per_gpu.values()) - min(per_gpu.values()) <= 1  # balanced
    assert len(per_gpu) == min(n_gpus, workers)


def test_an_existing_cuda_visible_devices_is_shared_instead_of_the_host(monkeypatch):
    monkeypatch.setenv(VISIBLE, "2, 3")
    assert [worker_environment(i, HOST) for i in range(3)] == [
        {VISIBLE: "2"},
        {VISIBLE: "3"},
        {VISIBLE: "2"},
    ]
    uuid = {VISIBLE: UUIDS[1]}
    assert worker_environment(4, HOST, environ=uuid) == uuid


@pytest.mark.parametrize(
    ("gpus", "environ"),
    [([], {}), ([], {VISIBLE: ""}), (HOST, {VISIBLE: ""})],  # last: the user hid them all
)
def test_no_gpu_gives_an_empty_environment(gpus, environ):
    assert [worker_environment(i, gpus, environ=environ) for i in range(3)] == [{}, {}, {}]


def test_pinning_this_process_sets_its_gpu(monkeypatch):
    monkeypatch.setenv(VISIBLE, "unchanged until pinned")
    assert pin_this_process(worker_environment(1, HOST, environ={}))
    assert os.environ[VISIBLE] == UUIDS[1]


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, HOST[0]),  # every GPU visible: CUDA's device 0
        (UUIDS[2], HOST[2]),
        (UUIDS[3][:12], HOST[3]),  # a UUID prefix, as CUDA accepts
        ("1,0", HOST[1]),
        ("", None),
        ("MIG-5c3d2e1f-0a9b-8c7d-6e5f-4a3b2c1d0e9f", None),
    ],
)
def test_current_gpu_follows_cuda_visible_devices(visible, expected):
    environ = {} if visible is None else {VISIBLE: visible}
    assert current_gpu(HOST, environ=environ) == expected


def test_measurement_lock_excludes_another_process(four_h100, monkeypatch, tmp_path):
    monkeypatch.setenv(VISIBLE, "2")
    probe = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "except BlockingIOError:\n    sys.exit(3)\n"
    )
    with measurement_lock(load_target("h100"), lock_dir=tmp_path / "locks") as path:
        assert path.name == f"{UUIDS[2]}.lock"  # an index resolves to its GPU's UUID
        with measurement_lock(load_target("h100"), lock_dir=tmp_path / "locks") as nested:
            assert nested == path  # a nested block does not wait on itself
        held = subprocess.run([sys.executable, "-c", probe, str(path)], check=False)
    free = subprocess.run([sys.executable, "-c", probe, str(path)], check=False)
    assert (held.returncode, free.returncode) == (3, 0)


def test_a_second_process_measures_after_the_first(four_h100, monkeypatch, tmp_path):
    monkeypatch.setenv(VISIBLE, UUIDS[1])
    locks = tmp_path / "locks"
    with measurement_lock(load_target("a100"), lock_dir=locks):
        same_gpu = _holder(locks, "1")  # the same GPU, named by its index
        other_gpu = _holder(locks, UUIDS[0])
        assert same_gpu.stdout.readline() == "waiting\n"
        assert other_gpu.communicate(timeout=60)[0] == "waiting\nlocked\n"  # not blocked
        time.sleep(0.5)
        assert same_gpu.poll() is None  # still waiting on this process
    assert same_gpu.communicate(timeout=60)[0] == "locked\n"


def _holder(locks, visible: str) -> subprocess.Popen:
    env = {**os.environ, VISIBLE: visible}
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(locks)], env=env, stdout=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize(("target", "visible"), [("cpu", "0"), ("h100", "")])
def test_measurement_lock_is_a_no_op_without_a_gpu(target, visible, monkeypatch, tmp_path):
    monkeypatch.setenv(VISIBLE, visible)
    with measurement_lock(load_target(target), lock_dir=tmp_path / "locks") as path:
        assert path is None
    assert not (tmp_path / "locks").exists()


MIXED = ("0, GPU-pcie, NVIDIA H100 PCIe", "1, GPU-sxm, NVIDIA H100 80GB HBM3")


@pytest.fixture
def mixed_host(monkeypatch, tmp_path):
    """A host with an H100 PCIe first and an H100 SXM second, as `nvidia-smi` lists them."""
    lines = "\n".join(MIXED)
    _fake_nvidia_smi(
        monkeypatch, tmp_path,
        'if [ "$1" = --query-gpu=index,uuid,name ] && [ "$2" = --format=csv,noheader ]; then\n'
        f"  printf '%s\\n' '{lines}'\nelse\n  echo 'Invalid combination' >&2; exit 2\nfi",
    )  # fmt: skip
    monkeypatch.delenv(VISIBLE, raising=False)


def test_workers_are_pinned_only_to_gpus_of_their_targets_model(mixed_host):
    from automl.targets.presence import serves_any

    accepts = serves_any([load_target("h100")])
    pins = {worker_environment(i, list_gpus(), accepts=accepts)[VISIBLE] for i in range(3)}
    assert pins == {"GPU-sxm"}  # never the PCIe card, which is not the h100 target's
    assert serves_any([load_target("cpu")]) is None  # no GPU is timed: any will do


@pytest.mark.parametrize(
    ("visible", "refused"),
    [("GPU-pcie", "on CUDA_VISIBLE_DEVICES='GPU-pcie', 'NVIDIA H100 PCIe'"),
     (None, "on CUDA's first device"), ("GPU-sxm", None)],
)  # fmt: skip
def test_a_trial_is_refused_on_a_gpu_that_is_not_its_targets(
    mixed_host, monkeypatch, visible, refused
):
    from automl.errors import TargetUnavailable
    from automl.targets.presence import require_pinned_gpu

    if visible is not None:
        monkeypatch.setenv(VISIBLE, visible)
    if refused is None:
        require_pinned_gpu(load_target("h100"))
        return
    with pytest.raises(TargetUnavailable, match="CUDA_VISIBLE_DEVICES=GPU-sxm") as excinfo:
        require_pinned_gpu(load_target("h100"))
    assert refused in str(excinfo.value) and "mixes GPU models" in str(excinfo.value)


def test_an_index_on_a_mixed_host_is_refused_unless_in_pci_order(mixed_host, monkeypatch):
    from automl.errors import TargetUnavailable
    from automl.targets.presence import require_pinned_gpu

    monkeypatch.setenv(VISIBLE, "1")  # the SXM card in nvidia-smi's order, maybe not CUDA's
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    with pytest.raises(TargetUnavailable, match="name the GPU by its UUID"):
        require_pinned_gpu(load_target("h100"))
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    require_pinned_gpu(load_target("h100"))
