"""Hardware targets: YAML data validated by pydantic, loaded into frozen records.

Each ``*.yaml`` file next to this module describes one target. Its ``name`` equals the
file stem and is stable: it appears in study names and cache keys. This module imports
neither torch nor onnxruntime; GPUs are detected with ``nvidia-smi``.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from automl.errors import SpecError, TargetUnavailable

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

_NVIDIA_SMI_TIMEOUT_S = 10.0
_STORAGE_HINT = "postgresql://USER@HOST/DB"

Precision = Literal["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4"]


class _PeaksModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    flops: dict[Precision, float] | None
    memory_bandwidth_gbs: float | None = Field(gt=0)
    memory_gb: float | None = Field(gt=0)
    source: str = Field(min_length=1)


class _TargetModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    kind: Literal["cpu", "cuda"]
    description: str
    execution_providers: list[str] = Field(min_length=1)
    precisions: list[Literal[32, 16, 8, 4]] = Field(min_length=1)
    intra_op_threads: int = Field(ge=0)
    device_match: str | None
    peaks: _PeaksModel


@dataclass(frozen=True)
class Peaks:
    """Datasheet peaks of a target; every figure is ``None``/empty where unknown.

    Attributes:
        flops: Peak operations per second keyed by precision (``fp32``, ``tf32``, ``fp16``,
            ``bf16``, ``fp8``, ``int8``, ``int4``, ``fp64``), dense (without sparsity).
        memory_bandwidth_gbs: Peak memory bandwidth in GB/s.
        memory_gb: Device memory in GB.
        source: Where the numbers come from.
    """

    flops: Mapping[str, float] = field(hash=False)
    memory_bandwidth_gbs: float | None
    memory_gb: float | None
    source: str


@dataclass(frozen=True)
class Target:
    """A hardware target that latency is measured on.

    Attributes:
        name: Stable identifier, used in study names and cache keys.
        kind: ``"cpu"`` or ``"cuda"``.
        description: One line for people.
        execution_providers: ONNX Runtime execution providers, in order of preference.
        precisions: Bit-widths the target can run, from {32, 16, 8, 4}.
        intra_op_threads: ONNX Runtime intra-op thread count pinned while measuring.
        device_match: Case-insensitive substring of the CUDA device name; ``None`` for cpu.
        peaks: Datasheet peaks.
    """

    name: str
    kind: Literal["cpu", "cuda"]
    description: str
    execution_providers: tuple[str, ...]
    precisions: tuple[int, ...]
    intra_op_threads: int
    device_match: str | None
    peaks: Peaks


def _to_target(model: _TargetModel) -> Target:
    p = model.peaks
    return Target(
        name=model.name,
        kind=model.kind,
        description=model.description,
        execution_providers=tuple(model.execution_providers),
        precisions=tuple(model.precisions),
        intra_op_threads=model.intra_op_threads,
        device_match=model.device_match,
        peaks=Peaks(
            flops=MappingProxyType(dict(p.flops or {})),
            memory_bandwidth_gbs=p.memory_bandwidth_gbs,
            memory_gb=p.memory_gb,
            source=p.source,
        ),
    )


@functools.cache
def _all_targets() -> MappingProxyType[str, Target]:
    found: dict[str, Target] = {}
    for entry in resources.files(__package__).iterdir():
        if not entry.name.endswith(".yaml"):
            continue
        stem = entry.name.removesuffix(".yaml")
        try:
            model = _TargetModel.model_validate(yaml.safe_load(entry.read_text("utf-8")))
        except (ValidationError, yaml.YAMLError) as e:
            raise SpecError(f"target file {entry.name} is invalid: {e}") from e
        if model.name != stem:
            raise SpecError(f"target file {entry.name} declares name {model.name!r}")
        if (model.kind == "cuda") != (model.device_match is not None):
            raise SpecError(f"target {stem}: device_match is required exactly for kind cuda")
        found[stem] = _to_target(model)
    return MappingProxyType(dict(sorted(found.items())))


def list_targets() -> list[Target]:
    """All known targets, sorted by name."""
    return list(_all_targets().values())


def load_target(name: str) -> Target:
    """Look up a target by name.

    Args:
        name: The target's stable name, e.g. ``"cpu"`` or ``"a100"``.

    Returns:
        The frozen target record.

    Raises:
        SpecError: No target has that name; the message lists the known names.
    """
    targets = _all_targets()
    if name not in targets:
        known = ", ".join(targets)
        raise SpecError(f"unknown target {name!r}; known targets: {known}")
    return targets[name]


def detect_gpu_names() -> list[str]:
    """Names of the NVIDIA GPUs on this machine, as ``nvidia-smi`` reports them.

    Returns:
        One name per GPU, or an empty list when ``nvidia-smi`` is missing or fails.
    """
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=_NVIDIA_SMI_TIMEOUT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def is_present(target: Target, detected: Sequence[str] | None = None) -> bool:
    """Whether this machine has the target's hardware.

    Args:
        target: The target.
        detected: GPU names to match against; ``None`` runs :func:`detect_gpu_names`.

    Returns:
        ``True`` for cpu; for cuda, whether a GPU name contains ``device_match``
        (case-insensitive).
    """
    if target.kind == "cpu":
        return True
    gpus = detect_gpu_names() if detected is None else detected
    needle = (target.device_match or "").lower()
    return any(needle in gpu.lower() for gpu in gpus)


def require_present(target: Target) -> None:
    """Raise unless this machine has the target's hardware.

    Args:
        target: The target.

    Raises:
        TargetUnavailable: The hardware is absent. The message names what is missing,
            what was detected, and how to run a worker on the right hardware.
    """
    gpus = [] if target.kind == "cpu" else detect_gpu_names()
    if is_present(target, gpus):
        return
    seen = ", ".join(repr(g) for g in gpus) if gpus else "no NVIDIA GPU (nvidia-smi found none)"
    raise TargetUnavailable(
        f"target {target.name!r} needs an NVIDIA GPU whose name contains "
        f"{target.device_match!r} ({target.description}), but this machine has: {seen}. "
        "Latency is always measured on the target hardware and is never estimated as a "
        "fallback. Run a worker on a machine with that GPU, sharing the study storage: "
        f"automl worker --target {target.name} --storage {_STORAGE_HINT}"
    )
