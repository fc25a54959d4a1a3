"""Hardware targets: YAML data validated by pydantic, loaded into frozen records.

Each ``*.yaml`` file next to this module describes one target. Its ``name`` equals the
file stem and is stable: it appears in study names and cache keys. This module imports
neither torch nor onnxruntime. Whether this machine has a target's GPU and runtime is
:mod:`automl.targets.presence`.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from automl.catalog import METHODS, Backend, first_running, get_backend, methods_for_bits
from automl.errors import SpecError
from automl.targets.nvidia_smi import is_mig

if TYPE_CHECKING:
    from collections.abc import Mapping


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
    kind: str | None = None
    description: str
    backends: list[str] = Field(min_length=1)
    methods: list[str] | None = Field(default=None, min_length=1)
    precisions: list[Literal[32, 16, 8, 4]] | None = Field(default=None, min_length=1)
    intra_op_threads: int = Field(ge=0)
    channel_multiple: int = Field(default=8, ge=1)
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
        kind: Where its runtimes run (their ``device``): ``"cpu"`` or ``"cuda"``.
        description: One line for people.
        execution_providers: ONNX Runtime execution providers of its backends, in order.
        precisions: Bit-widths the target can run, from {32, 16, 8, 4}: those of ``methods``.
        methods: Names of the quantization methods the target runs (rows of
            :data:`automl.catalog.METHODS`). A YAML that lists only ``precisions`` gets the
            methods of the old form for them (8 bits: ``int8-static`` and ``int8-dynamic``).
        intra_op_threads: ONNX Runtime intra-op thread count pinned while measuring.
        backends: Names of its latency backends in order of preference (rows of
            :data:`automl.catalog.BACKENDS`); each method runs on the first that runs it.
        device_names: The exact ``nvidia-smi`` GPU names this target measures (see
            :func:`device_refusal`); empty for cpu.
        peaks: Datasheet peaks.
        channel_multiple: Structured pruning keeps a multiple of this many channels per layer
            (torch-pruning's ``round_to``): kernels block channels (ONNX Runtime's CPU
            convolutions by 8, tensor cores by 8 or 16), and a pruned count off the block runs
            slower than the unpruned layer.
    """

    name: str
    kind: str
    description: str
    execution_providers: tuple[str, ...]
    precisions: tuple[int, ...]
    methods: tuple[str, ...]
    intra_op_threads: int
    backends: tuple[str, ...]
    device_names: tuple[str, ...]
    peaks: Peaks
    channel_multiple: int = 8

    def backend_for(self, method: str) -> Backend:
        """The backend that measures ``method`` here: the first of :attr:`backends` to run it.

        Raises:
            SpecError: The target does not run ``method``.
        """
        backend = first_running(self.backends, method) if method in self.methods else None
        if backend is None:
            raise SpecError(
                f"target {self.name!r} does not run method {method!r}; it runs "
                f"{', '.join(self.methods)}"
            )
        return backend

    def on_runtime(self, runtime: str | None) -> Target:
        """This target measuring on ``runtime`` alone (one of :attr:`backends`), with the
        methods it runs; itself for ``None``.

        Raises:
            SpecError: The target does not offer ``runtime``.
        """
        return self if runtime is None else _narrowed(self, runtime)


def _narrowed(target: Target, runtime: str) -> Target:
    """``target`` with ``runtime`` as its only runtime, and the methods it runs."""
    if runtime not in target.backends:
        raise SpecError(
            f"target {target.name!r} offers the runtimes {', '.join(target.backends)}, not "
            f"{runtime!r}"
        )
    methods = tuple(m for m in target.methods if m in get_backend(runtime).methods)
    return dataclasses.replace(target, backends=(runtime,), methods=methods)


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
    orphans = [m for m in methods if first_running(model.backends, m) is None]
    if orphans:
        raise SpecError(
            f"target {model.name}: no backend of {model.backends} runs methods {orphans}"
        )
    bits = tuple(sorted({METHODS[m].bits for m in methods}, reverse=True))
    if model.precisions is not None and set(model.precisions) != set(bits):
        raise SpecError(
            f"target {model.name}: precisions {model.precisions} differ from the bits of its "
            f"methods {list(bits)}; list only the methods"
        )
    return methods, bits


def _kind(model: _TargetModel) -> str:
    """The device that all the target's runtimes run on: its kind."""
    devices = {get_backend(name).device for name in model.backends}
    if len(devices) > 1 or (model.kind is not None and {model.kind} != devices):
        raise SpecError(
            f"target {model.name}: kind {model.kind!r} and runtimes {model.backends}, which run "
            f"on {sorted(devices)}; a target's runtimes share one device, which is its kind"
        )
    return devices.pop()


def _parse_target(data: object, stem: str) -> Target:
    """A target from a YAML file's data, validated; ``stem`` is the file's name."""
    try:
        model = _TargetModel.model_validate(data)
    except ValidationError as e:
        raise SpecError(f"target file {stem}.yaml is invalid: {e}") from e
    if model.name != stem:
        raise SpecError(f"target file {stem}.yaml declares name {model.name!r}")
    kind = _kind(model)
    if (kind == "cuda") != bool(model.device_names):
        raise SpecError(f"target {stem}: device_names is required exactly for kind cuda")
    if any(is_mig(n) for n in model.device_names or ()):
        raise SpecError(f"target {stem}: device_names lists a MIG slice; list whole GPUs")
    return _to_target(model, kind)


def _to_target(model: _TargetModel, kind: str) -> Target:
    p = model.peaks
    methods, precisions = _methods(model)
    return Target(
        name=model.name,
        kind=kind,
        description=model.description,
        execution_providers=tuple(
            dict.fromkeys(p for b in model.backends for p in get_backend(b).providers)
        ),
        precisions=precisions,
        methods=methods,
        intra_op_threads=model.intra_op_threads,
        backends=tuple(model.backends),
        device_names=tuple(model.device_names or ()),
        peaks=Peaks(
            flops=MappingProxyType(dict(p.flops or {})),
            memory_bandwidth_gbs=p.memory_bandwidth_gbs,
            memory_gb=p.memory_gb,
            source=p.source,
        ),
        channel_multiple=model.channel_multiple,
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
