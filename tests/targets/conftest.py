"""A host with A100s, as ``nvidia-smi`` describes it: the GPU itself is absent here."""

from __future__ import annotations

import os

import pytest

# What `nvidia-smi` prints on a host with two A100s, the first in MIG mode, per query.
FAKE_NVIDIA_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=name,mig.mode.current)
    printf 'NVIDIA A100-SXM4-80GB, Enabled\\nNVIDIA A100-SXM4-80GB, Disabled\\n' ;;
  --query-gpu=index,uuid,driver_version,name,mig.mode.current)
    printf '0, GPU-aaaa, 580.65.06, NVIDIA A100-SXM4-80GB, Enabled\\n'
    printf '1, GPU-bbbb, 580.65.06, NVIDIA A100-SXM4-80GB, Disabled\\n' ;;
  *) exit 6 ;;
esac
"""


@pytest.fixture
def a100_host(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``nvidia-smi`` that reports A100s, first on the PATH."""
    exe = tmp_path / "nvidia-smi"
    exe.write_text(FAKE_NVIDIA_SMI)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
