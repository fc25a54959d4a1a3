"""The two kinds of catalog entry, and the registries that defining one fills.

A quantization method is a subclass of :class:`Method`, a runtime a subclass of
:class:`Backend`, a model family a subclass of :class:`Family`; ``__init_subclass__`` registers
one instance of each, so defining the class is all it takes (Olive registers its passes the same
way). Entries are data plus one entry function: nothing here imports torch, onnx or onnxruntime,
so the target registry and the search spaces check names against the catalog at load (the REST
service included), and a method's converter or a family's builder imports its tools when it
runs.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from automl.catalog._entry import Entry
from automl.catalog.runtimes._base import BACKENDS, Backend
from automl.errors import SpecError, UnsupportedQuantization

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    import numpy as np
    from torch import nn

_METHODS: dict[str, Method] = {}
_FAMILIES: dict[str, Family] = {}
METHODS: Mapping[str, Method] = MappingProxyType(_METHODS)
FAMILIES: Mapping[str, Family] = MappingProxyType(_FAMILIES)
# The layouts of one sample: flat features (F,), signals (C, L), images (C, H, W), or int64
# token ids (L,) with a vocabulary.
LAYOUTS = ("features", "signals", "images", "tokens")
# The ops a per-layer method keeps or converts one by one: its "layers".
LAYER_OPS = ("Conv", "Gemm", "MatMul")
INT8_MODES = ("static", "dynamic")
# The kinds of graph a method writes, which a runtime declares it runs: plain fp32 or fp16;
# QDQ int8 as ONNX Runtime's CPU recipe writes it (U8S8, asymmetric activations); int8 with
# dynamic activation scales (DynamicQuantizeLinear, ConvInteger, MatMulInteger); 4-bit weights
# (MatMulNBits); signed symmetric QDQ int8 or fp8 E4M3, as TensorRT compiles them.
GRAPHS = ("fp32", "fp16", "qdq-int8", "dynamic-int8", "matmul-nbits", "qdq-int8-symmetric",
          "qdq-fp8")  # fmt: skip


class Method(Entry):
    """One way to quantize an fp32 ONNX graph.

    Attributes:
        name: Stable name, used in target YAMLs, trial records and cache keys.
        bits: Bit-width of the weights (32, 16, 8 or 4).
        needs_calibration: Whether :meth:`convert` needs calibration samples.
        cache_tag: Identity of the recipe; a graph made under another tag is not reused.
        graph: The kind of graph it writes (see :data:`GRAPHS`); the runtimes that run that
            kind run it (:attr:`backends`), so a new method of a known kind needs no runtime
            edited.
        provider_options: Options per execution provider that its graphs need (e.g.
            TensorRT's precision flags).
        unsafe_rewrites: ONNX Runtime graph rewrites that are wrong for its graphs.
        legacy: Its ``(bits, int8_mode)`` in the old vocabulary, if it has one.
        accuracy_drop: The largest test-accuracy drop from fp32 that it may cost a small
            trained model, its graph run as written (the contract tests hold it to that).
        per_layer: Whether it can leave named layers in fp32 (see :meth:`convert_layers`;
            ``KeepsLayers`` of ``automl/catalog/methods/_tools.py`` makes a QDQ method so).
        engine_precision: The data type that a TensorRT engine of its graphs must run at least
            one compute layer in (see :mod:`automl.pipeline.trt_engine`); None claims none.
    """

    _registry = _METHODS
    bits: ClassVar[int]
    needs_calibration: ClassVar[bool] = False
    cache_tag: ClassVar[str]
    graph: ClassVar[str]
    provider_options: ClassVar[Mapping[str, Mapping[str, str]]] = MappingProxyType({})
    unsafe_rewrites: ClassVar[tuple[str, ...]] = ()
    legacy: ClassVar[tuple[int, str | None] | None] = None
    accuracy_drop: ClassVar[float] = 0.02
    per_layer: ClassVar[bool] = False
    engine_precision: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        if "name" in cls.__dict__ and getattr(cls, "graph", None) not in GRAPHS:
            graph = getattr(cls, "graph", None)
            raise SpecError(f"{cls.__name__}: graph {graph!r} is not one of {list(GRAPHS)}")
        super().__init_subclass__(**kwargs)
        _sorted(_METHODS, _catalog_order)

    @property
    def backends(self) -> tuple[str, ...]:
        """The runtimes that run its graphs (those that declare its :attr:`graph`)."""
        return tuple(name for name, b in BACKENDS.items() if self.graph in b.graphs)

    def convert(self, src: Path, dst: Path, calibration: np.ndarray | None) -> None:
        """Write ``src`` quantized by this method at ``dst``.

        ``calibration`` is cast to the graph's input type, and given when
        :attr:`needs_calibration`. Tool failures raise :class:`UnsupportedQuantization`.
        """
        raise NotImplementedError

    def convert_layers(
        self,
        src: Path,
        dst: Path,
        calibration: np.ndarray | None,
        *,
        keep: Sequence[str] = (),
        only: Sequence[str] = (),
    ) -> None:
        """As :meth:`convert`, the layers (node names, of :data:`LAYER_OPS`) in ``keep`` left in
        fp32, reading fp32 inputs; with ``only``, no layer but those is quantized.

        Raises:
            SpecError: The method quantizes the whole graph (it is not :attr:`per_layer`).
        """
        raise SpecError(
            f"method {self.name!r} quantizes the whole graph; a method that keeps layers in "
            f"fp32 is one of {list(per_layer_methods())}"
        )


class Family(Entry):
    """A model family: an architecture the search builds from ``arch.*`` knobs.

    Attributes:
        name: Stable name, the value of ``arch.family``.
        takes: The input layouts it can take (see :data:`LAYOUTS`).
        knobs: Its own knobs, which a space sets as ``arch.extra.<name>``, with their bounds
            ``(low, high)``; the shared ones (width, depth, dropout, kernel_size, stages,
            width_growth, heads, mlp_ratio) are the fields of ``ArchConfig``.
        example: The knobs of a small model of the family, with the layout it is tested on:
            the contract tests build, train, prune and export it.
    """

    _registry = _FAMILIES
    takes: ClassVar[tuple[str, ...]]
    knobs: ClassVar[Mapping[str, tuple[float, float]]] = MappingProxyType({})
    example: ClassVar[Mapping[str, Any]]

    def build(
        self, arch: Any, input_shape: tuple[int, ...], num_classes: int, vocab_size: int | None
    ) -> nn.Module:
        """An untrained model of ``arch`` (an ``ArchConfig``) for samples of ``input_shape``,
        whose output layer is named ``classifier``."""
        raise NotImplementedError

    @property
    def needs(self) -> str:
        """What inputs it needs, in words, for refusals."""
        if "features" in self.takes:
            return "float features"
        if "tokens" in self.takes:
            return "int64 token ids (N, L) with vocab_size in the dataset"
        shapes = {"signals": "(C, L)", "images": "(C, H, W)"}
        return f"{' or '.join(shapes[layout] for layout in self.takes)} float inputs"

    def attention_heads(self, model: nn.Module) -> dict[nn.Module, int]:
        """The head count of each attention projection of ``model`` that pruning must keep
        whole (torch-pruning's ``num_heads``); none by default."""
        return {}

    def space_problem(self, values_of: Callable[[str], list]) -> str | None:
        """What is wrong with the knob values a space can suggest for this family, with the
        fix, or None; ``values_of(key)`` lists a space key's values (the knob's default where
        the space leaves it unset)."""
        return None


def input_layout(shape: tuple[int, ...], tokens: bool) -> str:
    """The layout of one sample of ``shape`` (see :data:`LAYOUTS`)."""
    if tokens:
        return "tokens"
    return {2: "signals", 3: "images"}.get(len(shape), "features")


def get_family(name: str) -> Family:
    """The family called ``name``.

    Raises:
        SpecError: No family has that name; the message lists the known ones.
    """
    if name not in FAMILIES:
        raise SpecError(
            f"unknown model family {name!r}; choose one of {list(FAMILIES)}, or name your own "
            "as 'package.module:function'"
        )
    return FAMILIES[name]


def _sorted(registry: dict[str, Any], key: Any) -> None:
    """Keep ``registry`` in catalog order after a registration."""
    entries = sorted(registry.values(), key=key)
    registry.clear()
    registry.update((e.name, e) for e in entries)


def _catalog_order(method: Method) -> tuple[Any, ...]:
    """Widest bits first; within a width, the old form's methods, then by name."""
    return (-method.bits, method.legacy is None, method.name)


def get_method(name: str) -> Method:
    """The method called ``name``.

    Raises:
        SpecError: No method has that name; the message lists the known ones.
    """
    return _lookup(METHODS, name, "quantization method")


def get_backend(name: str) -> Backend:
    """The backend called ``name``.

    Raises:
        SpecError: No backend has that name; the message lists the known ones.
    """
    return _lookup(BACKENDS, name, "runtime")


def _lookup(registry: Mapping[str, Any], name: str, kind: str) -> Any:
    """The entry called ``name``, or a SpecError that lists the known ones."""
    if name not in registry:
        raise SpecError(f"unknown {kind} {name!r}; known: {', '.join(registry)}")
    return registry[name]


def first_running(backends: Sequence[str], method: str) -> Backend | None:
    """The first of ``backends`` (names) that runs ``method``; ``None`` when none does."""
    return next((b for b in map(get_backend, backends) if method in b.methods), None)


def legacy_bits() -> tuple[int, ...]:
    """The bit-widths of the old ``(bits, int8_mode)`` form, widest first."""
    return tuple(sorted({m.legacy[0] for m in METHODS.values() if m.legacy}, reverse=True))


def method_for(bits: int, int8_mode: str = "static") -> Method:
    """The method of the old form: a bit-width, and for 8 bits an ``int8_mode``.

    This is the one place where the old vocabulary becomes a method.

    Raises:
        UnsupportedQuantization: ``bits`` is not one of :func:`legacy_bits`.
        SpecError: ``bits`` is 8 and ``int8_mode`` is unknown.
    """
    if bits not in legacy_bits():
        raise UnsupportedQuantization(
            f"bits={bits} is not supported; choose one of {legacy_bits()}"
        )
    if bits == 8 and int8_mode not in INT8_MODES:
        raise SpecError(f"int8_mode={int8_mode!r} is unknown; choose one of {INT8_MODES}")
    wanted = (bits, int8_mode if bits == 8 else None)
    return next(m for m in METHODS.values() if m.legacy == wanted)


def per_layer_methods() -> tuple[str, ...]:
    """The methods that can leave named layers in fp32 (:attr:`Method.per_layer`), in catalog
    order."""
    return tuple(m.name for m in METHODS.values() if m.per_layer)


def methods_for_bits(bits: Sequence[int]) -> tuple[str, ...]:
    """The old form's methods of these bit-widths, in catalog order (for ``precisions:``)."""
    return tuple(m.name for m in METHODS.values() if m.legacy and m.legacy[0] in bits)
