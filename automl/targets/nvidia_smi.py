"""``nvidia-smi`` queries: the GPUs of this machine, by name and by identity.

Nothing here imports torch or onnxruntime, nor knows about targets; a GPU in MIG mode is named
``"<name> MIG"``, as CUDA names its slices, so that the target registry can refuse it.
"""

from __future__ import annotations

import re
import shutil
import subprocess

_NVIDIA_SMI_TIMEOUT_S = 10.0

# A MIG slice as CUDA names it ("NVIDIA A100-SXM4-40GB MIG 1g.5gb") or as detect_gpu_names does.
MIG = re.compile(r"(?:^|\s)MIG(?:\s|$)", re.IGNORECASE)


def is_mig(gpu_name: str) -> bool:
    """Whether ``gpu_name`` names a MIG slice rather than a whole GPU."""
    return MIG.search(gpu_name) is not None


def detect_gpu_names() -> list[str]:
    """Names of the NVIDIA GPUs on this machine, as ``nvidia-smi`` reports them.

    A GPU in MIG mode is reported as its name followed by ``" MIG"`` (CUDA names its slices
    ``"<name> MIG <profile>"``), so that :func:`device_refusal` can refuse it.

    Returns:
        One name per GPU, or an empty list when ``nvidia-smi`` is missing or fails.
    """
    # mig.mode.current is "[N/A]" on GPUs without MIG; drivers that lack the field fail the
    # first query, and the second still names the GPUs.
    for fields in ("name,mig.mode.current", "name"):
        out = query_gpus(fields)
        if out is not None:
            return parse_gpu_query(out)
    return []


def query_gpus(fields: str) -> str | None:
    """``nvidia-smi --query-gpu=<fields>`` as CSV lines; ``None`` when it is missing or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        return subprocess.run(
            [exe, f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=_NVIDIA_SMI_TIMEOUT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def parse_gpu_identities(csv_text: str) -> list[dict[str, str]]:
    """GPUs from ``--query-gpu=index,uuid,driver_version,name[,mig.mode.current]`` CSV lines.

    Names are as :func:`detect_gpu_names` gives them: ``" MIG"`` marks a GPU in MIG mode.
    """
    gpus = []
    for line in csv_text.splitlines():
        fields = [f.strip() for f in line.split(",", 3)]
        if len(fields) == 4 and all(fields):
            values = [*fields[:3], *parse_gpu_query(fields[3])]
            gpus.append(dict(zip(("index", "uuid", "driver", "name"), values, strict=True)))
    return gpus


def parse_gpu_query(csv_text: str) -> list[str]:
    """GPU names from ``nvidia-smi --query-gpu=name[,mig.mode.current]`` CSV lines."""
    names = []
    for line in csv_text.splitlines():
        name, _, mig_mode = line.partition(",")
        if name.strip():
            mig = mig_mode.strip().lower() == "enabled"
            names.append(f"{name.strip()} MIG" if mig else name.strip())
    return names
