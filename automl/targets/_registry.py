"""Hardware targets: YAML data validated by pydantic, loaded into frozen records.

Each ``*.yaml`` file next to this module describes one target. Its ``name`` equals the
file stem and is stable: it appears in study names and cache keys. This module imports
neither torch nor onnxruntime when loaded; GPUs are detected with ``nvidia-smi``, and
onnxruntime is asked for its providers only once a CUDA target's GPU has been found.

A CUDA target lists the exact ``nvidia-smi --query-gpu=name`` models it measures
(``device_names``), compared without regard to case or repeated spaces, never as substrings:
"A100" must not take an "RTX A1000", nor "H200" a "GH200 480GB". A MIG slice is refused even
when its parent is a listed model: it has a fraction of the GPU's SMs and memory bandwidth, so
its latencies are not the target's.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from automl.errors import SpecError, TargetUnavailable
from automl.pipeline.methods import BITS, METHODS, methods_for_bits
from automl.targets.nvidia_smi import detect_gpu_names, parse_gpu_identities, query_gpus

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

_STORAGE_HINT = "postgresql://USER@HOST/DB"
# A MIG slice as CUDA names it ("NVIDIA A100-SXM4-40GB MIG 1g.5gb") or as detect_gpu_names does.
_MIG = re.compile(r"(?:^|\s)MIG(?:\s|$)", re.IGNORECASE)

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
    methods: list[str] | None = Field(default=None, min_length=1)
    precisions: list[Literal[32, 16, 8, 4]] | None = Field(default=None, min_length=1)
    intra_op_threads: int = Field(ge=0)
    device_names: list[str] | None = None
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
        precisions: Bit-widths the target can run, from {32, 16, 8, 4}: those of ``methods``.
        methods: Names of the quantization methods the target runs (rows of
            :mod:`automl.pipeline.methods`). A YAML that lists only ``precisions`` gets the
            methods of the old form for them (8 bits: ``int8-static`` and ``int8-dynamic``).
        intra_op_threads: ONNX Runtime intra-op thread count pinned while measuring.
        device_names: The exact ``nvidia-smi`` GPU names this target measures (see
            :func:`device_refusal`); empty for cpu.
        peaks: Datasheet peaks.
    """

    name: str
    kind: Literal["cpu", "cuda"]
    description: str
    execution_providers: tuple[str, ...]
    precisions: tuple[int, ...]
    methods: tuple[str, ...]
    intra_op_threads: int
    device_names: tuple[str, ...]
    peaks: Peaks


def _methods(model: _TargetModel) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The target's methods and the bit-widths they give, checked against the table."""
    if model.methods is None and model.precisions is None:
        raise SpecError(f"target {model.name}: list its methods (or its precisions)")
    methods = tuple(model.methods or methods_for_bits(model.precisions or ()))
    unknown = [m for m in methods if m not in METHODS]
    if unknown or len(set(methods)) != len(methods):
        raise SpecError(
            f"target {model.name}: methods {list(methods)} must be distinct names among "
            f"{', '.join(METHODS)}; unknown: {unknown}"
        )
    bits = tuple(b for b in BITS if any(METHODS[m].bits == b for m in methods))
    if model.precisions is not None and set(model.precisions) != set(bits):
        raise SpecError(
            f"target {model.name}: precisions {model.precisions} differ from the bits of its "
            f"methods {list(bits)}; list only the methods"
        )
    return methods, bits


def _parse_target(data: object, stem: str) -> Target:
    """A target from a YAML file's data, validated; ``stem`` is the file's name."""
    try:
        model = _TargetModel.model_validate(data)
    except ValidationError as e:
        raise SpecError(f"target file {stem}.yaml is invalid: {e}") from e
    if model.name != stem:
        raise SpecError(f"target file {stem}.yaml declares name {model.name!r}")
    if (model.kind == "cuda") != bool(model.device_names):
        raise SpecError(f"target {stem}: device_names is required exactly for kind cuda")
    if any(_is_mig(n) for n in model.device_names or ()):
        raise SpecError(f"target {stem}: device_names lists a MIG slice; list whole GPUs")
    return _to_target(model)


def _to_target(model: _TargetModel) -> Target:
    p = model.peaks
    methods, precisions = _methods(model)
    return Target(
        name=model.name,
        kind=model.kind,
        description=model.description,
        execution_providers=tuple(model.execution_providers),
        precisions=precisions,
        methods=methods,
        intra_op_threads=model.intra_op_threads,
        device_names=tuple(model.device_names or ()),
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
            data = yaml.safe_load(entry.read_text("utf-8"))
        except yaml.YAMLError as e:
            raise SpecError(f"target file {entry.name} is invalid: {e}") from e
        found[stem] = _parse_target(data, stem)
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


def gpu_identity(target: Target) -> dict[str, str] | None:
    """Index, UUID, driver version and name of the GPU here that measures ``target``.

    That is the first entry of ``CUDA_VISIBLE_DEVICES`` when it is set, else the first GPU of
    the target's model.

    Returns:
        ``{"index", "uuid", "driver", "name"}`` from ``nvidia-smi`` (its index is CUDA's device
        number when every GPU is visible), or ``None`` when none matches or it cannot tell.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    for fields in ("name,mig.mode.current", "name"):  # as in detect_gpu_names
        out = query_gpus(f"index,uuid,driver_version,{fields}")
        if out is not None:
            gpus = parse_gpu_identities(out)
            if visible:  # this process's GPU only (automl's workers name it by UUID)
                gpus = [g for g in gpus if visible in (g["index"], g["uuid"])]
            return next((g for g in gpus if device_refusal(target, g["name"]) is None), None)
    return None


def _is_mig(gpu_name: str) -> bool:
    return _MIG.search(gpu_name) is not None


def _canonical(gpu_name: str) -> str:
    return " ".join(gpu_name.split()).casefold()


def device_refusal(target: Target, gpu_name: str) -> str | None:
    """Why a GPU cannot measure ``target``; ``None`` when it can. Pure: names only.

    Args:
        target: A CUDA target.
        gpu_name: A GPU's name as ``nvidia-smi --query-gpu=name`` (or CUDA) reports it.

    Returns:
        ``None`` when the name equals one of the target's ``device_names`` (case and repeated
        spaces aside) and is not a MIG slice; otherwise the reason, for people.
    """
    accepted = {_canonical(n) for n in target.device_names}
    base = _MIG.split(gpu_name, maxsplit=1)[0]
    if _canonical(base) not in accepted:
        wanted = " or ".join(repr(n) for n in target.device_names) or "no GPU (a cpu target)"
        return f"{gpu_name!r} is not {wanted}"
    if _is_mig(gpu_name):
        return (
            f"{gpu_name!r} is a MIG slice, refused: it has a fraction of the GPU's compute and "
            "memory bandwidth, so its latencies are not the target's; measure on a whole GPU "
            "(MIG mode off)"
        )
    return None


def matching_gpus(target: Target, gpu_names: Sequence[str]) -> list[str]:
    """The names among ``gpu_names`` that can measure ``target`` (see :func:`device_refusal`)."""
    return [g for g in gpu_names if device_refusal(target, g) is None]


def runtime_refusal(target: Target, providers: Sequence[str]) -> str | None:
    """Why an ONNX Runtime with ``providers`` cannot measure ``target``; ``None`` when it can.

    Pure: names only. Latency is never measured on another provider in the target's place.

    Args:
        target: The target.
        providers: ``onnxruntime.get_available_providers()`` of the runtime installed here.

    Returns:
        ``None`` when ``providers`` has the target's first one; otherwise one line that names
        what is missing and the fix.
    """
    wanted = target.execution_providers[0]
    if wanted in providers:
        return None
    cuda_fix = "run `make install-gpu` in the automl checkout"
    fix = cuda_fix if target.kind == "cuda" else f"install an ONNX Runtime build with {wanted}"
    return (
        f"target {target.name!r} is measured on ONNX Runtime's {wanted}, which the installed "
        f"ONNX Runtime lacks (it has {', '.join(providers) or 'none'}): {fix}"
    )


def is_present(target: Target, detected: Sequence[str] | None = None) -> bool:
    """Whether this machine can measure the target.

    Args:
        target: The target.
        detected: GPU names to match, by name only; ``None`` inspects this machine.

    Returns:
        ``True`` for cpu; for cuda, whether a GPU is one of the target's ``device_names`` and
        not a MIG slice (see :func:`device_refusal`), and, inspecting this machine, whether
        its ONNX Runtime has the target's provider (see :func:`runtime_refusal`).
    """
    if target.kind == "cpu":
        return True
    gpus = detect_gpu_names() if detected is None else detected
    if not matching_gpus(target, gpus):
        return False
    return detected is not None or runtime_refusal(target, _ort_providers()) is None


def require_present(target: Target) -> None:
    """Raise unless this machine has the target's hardware and a runtime that can use it.

    Args:
        target: The target.

    Raises:
        TargetUnavailable: The hardware is absent: the message names what is missing, what
            was detected and why each GPU was refused, and how to run a worker on the right
            hardware. Or ONNX Runtime lacks the target's provider (see :func:`runtime_refusal`).
    """
    gpus = [] if target.kind == "cpu" else detect_gpu_names()
    if is_present(target, gpus):
        refusal = None if target.kind == "cpu" else runtime_refusal(target, _ort_providers())
        if refusal:
            raise TargetUnavailable(refusal)
        return
    if gpus:
        seen = "; ".join(device_refusal(target, g) or repr(g) for g in gpus)
    else:
        seen = "no NVIDIA GPU (nvidia-smi found none)"
    wanted = " or ".join(repr(n) for n in target.device_names)
    raise TargetUnavailable(
        f"target {target.name!r} needs a whole NVIDIA GPU named {wanted} "
        f"({target.description}), but this machine has: {seen}. "
        "Latency is always measured on the target hardware and is never estimated as a "
        "fallback. Run a worker on a machine with that GPU, sharing the study storage: "
        f"automl worker --target {target.name} --storage {_STORAGE_HINT}"
    )


def _ort_providers() -> list[str]:
    """The execution providers of the ONNX Runtime installed here (imported only now)."""
    import onnxruntime

    return list(onnxruntime.get_available_providers())
