"""A candidate: one point of the joint search space, independent of Optuna."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from automl.errors import SpecError
from automl.pipeline.methods import BITS, Method, get_method, method_for

FAMILIES = ("mlp", "cnn", "resnet", "mobilenet")


@dataclass(frozen=True)
class ArchConfig:
    """Architecture knobs: ``kernel_size`` applies to conv families, ``dropout`` to all."""

    family: str
    width: int = 32
    depth: int = 2
    kernel_size: int = 3
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise SpecError(f"unknown model family {self.family!r}; choose one of {list(FAMILIES)}")
        if self.width < 1 or self.depth < 1:
            raise SpecError(f"width and depth must be >= 1, got {self.width} and {self.depth}")
        if self.kernel_size < 1 or self.kernel_size % 2 == 0:
            raise SpecError(f"kernel_size must be odd and >= 1, got {self.kernel_size}")
        if not 0.0 <= self.dropout < 1.0:
            raise SpecError(f"dropout must be in [0, 1), got {self.dropout}")


@dataclass(frozen=True)
class TrainConfig:
    """Training settings; ``batch_size`` is the training batch, not the serving batch."""

    epochs: int = 6
    lr: float = 1e-2
    weight_decay: float = 1e-4
    batch_size: int = 32

    def __post_init__(self) -> None:
        if self.epochs < 0 or self.batch_size < 1 or self.lr <= 0 or self.weight_decay < 0:
            raise SpecError(f"invalid training settings: {self}")


INT8_MODES = ("static", "dynamic")


@dataclass(frozen=True)
class Candidate:
    """Architecture, pruning ratio, quantization, serving batch size and training settings.

    The quantization method is named by ``method`` (see :mod:`automl.pipeline.methods`), or by
    the older pair ``bits`` and ``int8_mode``; a named method sets ``bits`` to its own.
    """

    arch: ArchConfig
    pruning_ratio: float = 0.0
    bits: int = 32
    int8_mode: str = "static"
    batch_size: int = 1
    train: TrainConfig = field(default_factory=TrainConfig)
    finetune_epochs: int = 3
    method: str | None = None

    def __post_init__(self) -> None:
        if self.method is not None:
            object.__setattr__(self, "bits", get_method(self.method).bits)
        if self.bits not in BITS:
            raise SpecError(f"bits must be one of {list(BITS)}, got {self.bits}")
        if self.int8_mode not in INT8_MODES:
            raise SpecError(f"int8_mode must be one of {list(INT8_MODES)}, got {self.int8_mode!r}")
        if self.batch_size < 1:
            raise SpecError(f"batch_size must be >= 1, got {self.batch_size}")
        if not 0.0 <= self.pruning_ratio < 1.0:
            raise SpecError(f"pruning_ratio must be in [0, 1), got {self.pruning_ratio}")

    @property
    def quant_method(self) -> Method:
        """The quantization method: the named one, or the one of ``bits`` and ``int8_mode``."""
        if self.method is not None:
            return get_method(self.method)
        return method_for(self.bits, self.int8_mode)

    def as_dict(self) -> dict:
        """Plain JSON-able form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> Candidate:
        """Inverse of :meth:`as_dict`."""
        values = dict(values)
        arch = ArchConfig(**values.pop("arch"))
        train = TrainConfig(**values.pop("train", {}))
        return cls(arch=arch, train=train, **values)
