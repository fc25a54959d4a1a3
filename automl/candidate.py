"""A candidate: one point of the joint search space, independent of Optuna."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from automl.catalog import (
    FAMILIES,
    INT8_MODES,
    Method,
    get_backend,
    get_method,
    legacy_bits,
    method_for,
    per_layer_methods,
)
from automl.errors import SpecError
from automl.plugins import PLUGIN

# A user-written family: ``package.module:function`` (see :mod:`automl.models`).
OUTPUT_LAYER = "classifier"
_MAX_STAGE_WIDTH = 4096


@dataclass(frozen=True)
class ArchConfig:
    """Architecture knobs of a model family.

    ``family`` is a family of the catalog (:data:`automl.catalog.FAMILIES`) or a user's
    ``package.module:function``.
    ``width`` and ``depth`` apply to all: a conv family has ``depth`` blocks in each of its
    ``stages``, the first of each stage after the first downsampling by 2, and its width grows
    by ``width_growth`` per stage; a transformer has ``depth`` encoder layers of ``width``
    (d_model) with ``heads`` attention heads and an MLP of ``mlp_ratio`` × ``width``.
    ``kernel_size`` applies to conv families, ``dropout`` to all. ``extra`` holds the knobs a
    space declares for a user-written family (``arch.extra.<name>``), and ``output_layer``
    names its output layer, which pruning leaves alone.
    """

    family: str
    width: int = 32
    depth: int = 2
    kernel_size: int = 3
    dropout: float = 0.0
    stages: int = 1
    width_growth: float = 1.0
    heads: int = 4
    mlp_ratio: float = 2.0
    extra: dict = field(default_factory=dict, hash=False)
    output_layer: str = OUTPUT_LAYER

    def __post_init__(self) -> None:
        if self.family not in FAMILIES and not PLUGIN.fullmatch(self.family):
            raise SpecError(
                f"unknown model family {self.family!r}; choose one of {list(FAMILIES)}, or "
                "name your own as 'package.module:function'"
            )
        if self.width < 1 or self.depth < 1:
            raise SpecError(f"width and depth must be >= 1, got {self.width} and {self.depth}")
        if self.kernel_size < 1 or self.kernel_size % 2 == 0:
            raise SpecError(f"kernel_size must be odd and >= 1, got {self.kernel_size}")
        if not 0.0 <= self.dropout < 1.0:
            raise SpecError(f"dropout must be in [0, 1), got {self.dropout}")
        self._check_stages()
        self._check_transformer()
        if self.is_user_family:
            return
        if self.output_layer != OUTPUT_LAYER:
            raise SpecError(
                f"output_layer is for user-written families; the family {self.family!r} of "
                f"the catalog names its output layer {OUTPUT_LAYER!r}"
            )
        self._check_extra()

    @property
    def is_user_family(self) -> bool:
        """Whether ``family`` is a user's ``package.module:function``."""
        return self.family not in FAMILIES

    def stage_widths(self) -> list[int]:
        """The width of each stage of a conv family, the first being ``width``."""
        return [max(1, round(self.width * self.width_growth**s)) for s in range(self.stages)]

    def _check_extra(self) -> None:
        """A catalog family's own knobs (``arch.extra.<name>``): declared, and within bounds."""
        knobs = FAMILIES[self.family].knobs
        for name, value in self.extra.items():
            if name not in knobs:
                raise SpecError(
                    f"family {self.family!r} has no knob arch.extra.{name}; its own knobs: "
                    f"{sorted(knobs) or 'none'}"
                )
            low, high = knobs[name]
            if not low <= value <= high:
                raise SpecError(
                    f"arch.extra.{name} = {value} is outside [{low}, {high}] for family "
                    f"{self.family!r}"
                )

    def _check_stages(self) -> None:
        if not 1 <= self.stages <= 8 or not 1.0 <= self.width_growth <= 4.0:
            raise SpecError(
                f"stages must be in 1..8 and width_growth in [1, 4], got {self.stages} and "
                f"{self.width_growth}"
            )
        if self.stage_widths()[-1] > _MAX_STAGE_WIDTH:
            raise SpecError(
                f"the last stage would be {self.stage_widths()[-1]} wide (width {self.width} × "
                f"{self.width_growth}^{self.stages - 1}); at most {_MAX_STAGE_WIDTH}: use fewer "
                "stages or a smaller width_growth"
            )

    def _check_transformer(self) -> None:
        if self.heads < 1 or not 0 < self.mlp_ratio <= 16:
            raise SpecError(
                f"heads must be >= 1 and mlp_ratio in (0, 16], got {self.heads} and "
                f"{self.mlp_ratio}"
            )
        if self.family == "transformer" and self.width % self.heads:
            raise SpecError(
                f"transformer width (d_model) {self.width} is not divisible by heads "
                f"{self.heads}; choose widths that are multiples of every heads value"
            )


@dataclass(frozen=True)
class TrainConfig:
    """Training settings; ``batch_size`` is the training batch, not the serving batch.

    ``kd_alpha`` > 0 mixes cross-entropy with distillation from a teacher's logits at
    ``kd_temperature`` (see :func:`automl.pipeline.train.train`).
    """

    epochs: int = 6
    lr: float = 1e-2
    weight_decay: float = 1e-4
    batch_size: int = 32
    kd_alpha: float = 0.0
    kd_temperature: float = 4.0

    def __post_init__(self) -> None:
        if self.epochs < 0 or self.batch_size < 1 or self.lr <= 0 or self.weight_decay < 0:
            raise SpecError(f"invalid training settings: {self}")


# The most requests one load run of a serving study schedules (8 bytes each, three arrays).
MAX_LOAD_REQUESTS = 2_000_000


@dataclass(frozen=True)
class Batching:
    """Dynamic-batching settings of a serving study, as Triton's ``config.pbtxt`` names them
    (see :mod:`automl.pipeline.serving`).

    Attributes:
        max_batch: The largest batch the batcher forms.
        max_queue_delay_ms: How long the oldest waiting request may wait for others.
        instances: Model instances serving at once, each on its own thread.
    """

    max_batch: int = 1
    max_queue_delay_ms: float = 0.0
    instances: int = 1

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.instances < 1 or self.max_queue_delay_ms < 0:
            raise SpecError(
                f"serving settings need max_batch >= 1, instances >= 1 and "
                f"max_queue_delay_ms >= 0, got {self}"
            )


# ONNX Runtime's graph optimisation levels, fewest rewrites first (see automl.catalog.runtimes._ort).
GRAPH_OPTIMIZATIONS = ("disable", "basic", "extended", "all")


@dataclass(frozen=True)
class Candidate:
    """Architecture, pruning ratio, quantization, serving batch size and training settings.

    The quantization method is named by ``method`` (see :data:`automl.catalog.METHODS`); the
    older pair ``bits`` and ``int8_mode`` is translated to it by :meth:`from_dict`, the one way
    in from spaces and stored trials.
    ``arch`` is None for a trained model (the study's ``model``), which is loaded, not trained.
    The fine-tune after pruning runs at ``finetune_lr`` (default: a third of ``train.lr``) and,
    with ``kd_alpha`` > 0, distils the unpruned model's logits at ``kd_temperature``.
    ``graph_optimization`` is ONNX Runtime's graph optimisation level for the deployed graph
    (``disable``, ``basic``, ``extended`` or ``all``). ``serving`` holds the dynamic-batching
    settings of a serving study (the ``serving.*`` knobs); ``batch_size`` is then the batch
    that isolated latency is measured at. ``runtime`` names the runtime that serves the graph
    (one of the target's; ``None``: the target's first that runs the method).
    """

    arch: ArchConfig | None
    pruning_ratio: float = 0.0
    batch_size: int = 1
    train: TrainConfig = field(default_factory=TrainConfig)
    finetune_epochs: int = 3
    method: str = "fp32"
    finetune_lr: float | None = None
    kd_alpha: float = 0.0
    kd_temperature: float = 4.0
    graph_optimization: str = "all"
    serving: Batching | None = None
    keep_fp32: int = 0
    runtime: str | None = None

    def __post_init__(self) -> None:
        if self.graph_optimization not in GRAPH_OPTIMIZATIONS:
            raise SpecError(
                f"graph_optimization must be one of {list(GRAPH_OPTIMIZATIONS)}, got "
                f"{self.graph_optimization!r}"
            )
        get_method(self.method)  # an unknown name is refused, with the known ones
        if self.runtime is not None:
            get_backend(self.runtime)
        if self.batch_size < 1:
            raise SpecError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.keep_fp32 < 0 or (self.keep_fp32 and not self.quant_method.per_layer):
            per_layer = ", ".join(per_layer_methods())
            raise SpecError(
                f"keep_fp32={self.keep_fp32}: it is a count of layers >= 0, and only a per-layer "
                f"method keeps layers in fp32, not {self.quant_method.name!r}; in a space, give it "
                f"'when: {{method: [...]}}' naming the space's per-layer methods ({per_layer})"
            )
        if not 0.0 <= self.pruning_ratio < 1.0:
            raise SpecError(f"pruning_ratio must be in [0, 1), got {self.pruning_ratio}")
        if not 0.0 <= self.kd_alpha <= 1.0 or self.kd_temperature <= 0:
            raise SpecError(
                f"kd_alpha must be in [0, 1] and kd_temperature > 0, got {self.kd_alpha} "
                f"and {self.kd_temperature}"
            )
        if self.finetune_lr is not None and self.finetune_lr <= 0:
            raise SpecError(f"finetune_lr must be > 0, got {self.finetune_lr}")

    @property
    def quant_method(self) -> Method:
        """The quantization method."""
        return get_method(self.method)

    @property
    def bits(self) -> int:
        """The method's bit-width (32 for fp32)."""
        return self.quant_method.bits

    def as_dict(self) -> dict:
        """Plain JSON-able form, with the method's ``bits`` for readers."""
        return {**asdict(self), "bits": self.bits}

    @classmethod
    def from_dict(cls, values: dict) -> Candidate:
        """Inverse of :meth:`as_dict`; the older ``bits`` and ``int8_mode`` become ``method``.

        Raises:
            SpecError: An unknown method, or bits or int8_mode outside the old form.
        """
        values = dict(values)
        values["method"] = method_of(values)
        values.pop("bits", None)
        values.pop("int8_mode", None)
        arch_values = values.pop("arch", None)
        arch = ArchConfig(**arch_values) if arch_values else None
        train = TrainConfig(**values.pop("train", {}))
        serving = values.pop("serving", None)
        batching = Batching(**serving) if serving else None
        return cls(arch=arch, train=train, serving=batching, **values)


def method_of(values: dict) -> str:
    """The method of a candidate's values (flat or stored): ``method``, or the one that the
    older ``bits`` and ``int8_mode`` name. The one place the old form becomes a method.

    Raises:
        SpecError: bits or int8_mode outside the old form.
    """
    if values.get("method") is not None:
        return values["method"]
    bits, int8_mode = values.get("bits", 32), values.get("int8_mode") or "static"
    if bits not in legacy_bits():
        raise SpecError(f"bits must be one of {list(legacy_bits())}, got {bits}")
    if int8_mode not in INT8_MODES:
        raise SpecError(f"int8_mode must be one of {list(INT8_MODES)}, got {int8_mode!r}")
    return method_for(bits, int8_mode).name


@dataclass(frozen=True)
class Built:
    """What a trial's stages built from its candidate, as the trial recorded it.

    Attributes:
        method: The method whose graph was deployed: ``fp32`` where a per-layer method's
            ``keep_fp32`` kept every layer, so that nothing was quantized.
        widths: The output channels of each hidden layer, in graph order (the output layer
            left out); empty where the trial predates this record.
        pruned: Whether pruning removed any channel (channels are kept in multiples of the
            target's ``channel_multiple``, so a small ratio may remove none); ``None`` where
            unknown.
    """

    method: str
    widths: tuple[int, ...] = ()
    pruned: bool | None = None


# Distinct widths a label lists one by one; more are shown as their range.
_LISTED_WIDTHS = 3


def describe(values: dict, built: Built | None = None) -> str:
    """The short form of a stored candidate, as built where ``built`` says how.

    The model reads as built (``mlp w8 d1``): a pruned one adds the width and ratio asked
    (``(w16 prune 0.2)``), so that two params that build one network read alike; a ratio that
    removed nothing says so. The method is the one deployed: an ``int8-mixed`` that kept every
    layer reads ``fp32 (all layers kept)``.
    """
    arch, ratio = values.get("arch"), values.get("pruning_ratio", 0.0)
    widths = built.widths if built else ()
    parts = []
    if arch:
        shown = _widths_text(widths) if widths else str(arch["width"])
        parts.append(f"{arch['family']} w{shown} d{arch['depth']}")
    if ratio and built is not None and built.pruned is False:
        parts.append(f"prune {ratio:.1f} removed nothing")
    elif ratio and arch and widths:
        parts.append(f"(w{arch['width']} prune {ratio:.1f})")
    elif ratio and widths:
        parts.append(f"prune {ratio:.1f} to w{_widths_text(widths)}")
    elif ratio or not built:  # a record without what was built reads as it always did
        parts.append(f"prune {ratio:.1f}")
    asked = method_of(values)
    method = built.method if built else asked
    parts.append(method if method == asked else f"{method} (all layers kept)")
    parts.append(f"batch {values['batch_size']}")
    if (level := values.get("graph_optimization", "all")) != "all":
        parts.append(f"graph-opt {level}")
    if runtime := values.get("runtime"):
        parts.append(f"on {runtime}")
    if serving := values.get("serving"):  # the dynamic batcher's settings
        parts.append(
            f"serve ≤{serving['max_batch']} wait {serving['max_queue_delay_ms']:g} ms"
            f" ×{serving['instances']}"
        )
    return " ".join(parts)


def _widths_text(widths: tuple[int, ...]) -> str:
    """``8``, ``16/32``, or the range of many distinct widths (``16-128``)."""
    distinct = sorted(set(widths))
    if len(distinct) > _LISTED_WIDTHS:
        return f"{distinct[0]}-{distinct[-1]}"
    return "/".join(str(w) for w in distinct)
