"""The runtime contract: what every runtime of the catalog does, and the registry of them.

A runtime (class :class:`Backend`) is one file in this folder: defining a subclass with a
``name`` registers it, and the contract suite (``tests/catalog/test_runtime_contract.py``)
checks it the moment it exists. A runtime says which kinds of graph it runs (:attr:`graphs`,
the :data:`automl.catalog.GRAPHS` a method writes), whether it can start on this host
(:meth:`unavailable`), and opens a session of an ONNX file for a batch and a thread count
(:meth:`open_session`); a session then tells what ran where and in what precision
(:meth:`placement`) and what it ran with (:meth:`environment`). Timing a session is the
pipeline's (:mod:`automl.pipeline.timers`): a host timer calls the session's ``run``.

Nothing here imports a runtime's package: each runtime imports its own inside its methods, so
the catalog loads in the REST service and where a runtime is not installed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from automl.catalog._entry import Entry
from automl.errors import SpecError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    import numpy as np

CPU, CUDA, TRT = "CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"
_BACKENDS: dict[str, Backend] = {}
BACKENDS: Mapping[str, Backend] = MappingProxyType(_BACKENDS)


class Session(Protocol):
    """A graph opened on a runtime, as evaluation and host timing call it: the shape of ONNX
    Runtime's ``InferenceSession``, which the other runtimes' sessions take on."""

    def get_inputs(self) -> Sequence[Any]:
        """The graph's inputs: each with ``name``, ``type`` (``"tensor(float)"``) and
        ``shape``."""

    def get_outputs(self) -> Sequence[Any]:
        """The graph's outputs, described as :meth:`get_inputs` describes the inputs."""

    def run(self, output_names: Sequence[str] | None, feed: Mapping[str, np.ndarray]) -> list:
        """The outputs (all of them for ``None``) of one run on ``feed``, as numpy arrays."""


class Backend(Entry, ABC):
    """A runtime: one way to run and time a graph, with everything that touches it.

    Attributes:
        name: Stable name, used in target YAMLs, the ``runtime`` knob and trial records.
        graphs: The kinds of graph it runs (:data:`automl.catalog.GRAPHS`); the methods that
            write them are its :attr:`methods`.
        providers: What runs the graph's nodes, in order; compute must run on the first
            (ONNX Runtime's execution providers, or the runtime's own device name).
        device: Where the graph runs: ``"cpu"`` or ``"cuda"``; a target's kind is its
            runtimes' device.
        on_device: Timed device-resident (inputs and outputs bound on ``device``), rather than
            host to host.
        install: The command that installs it, for refusals.
        package: The Python package it runs in, as measurements record it.
        profiles: Whether :mod:`automl.pipeline.profile` can time its graphs per operator
            (ONNX Runtime's profiler); a quantized trial on a runtime without it records its
            gain over fp32 without the operators' times.
    """

    _registry = _BACKENDS
    graphs: ClassVar[tuple[str, ...]]
    providers: ClassVar[tuple[str, ...]]
    device: ClassVar[str]
    on_device: ClassVar[bool] = False
    install: ClassVar[str]
    package: ClassVar[str]
    profiles: ClassVar[bool] = False

    @property
    def provider(self) -> str:
        """What must run the compute nodes."""
        return self.providers[0]

    @property
    def methods(self) -> tuple[str, ...]:
        """The methods whose graphs it runs, in catalog order."""
        from automl.catalog._registry import METHODS

        return tuple(name for name, m in METHODS.items() if m.graph in self.graphs)

    @abstractmethod
    def unavailable(self) -> str | None:
        """Why it cannot start on this host, with the command that fixes it; ``None`` when it
        can. Cheap enough to ask before every study."""

    @abstractmethod
    def open_session(
        self,
        model_path: Path | str,
        method: str,
        *,
        threads: int,
        batch_size: int | None = None,
        cache_dir: Path | None = None,
        optimization: str = "all",
    ) -> Session:
        """A session of ``model_path``, a graph of ``method``.

        Args:
            model_path: The ONNX file.
            method: The graph's quantization method; it must be one of :attr:`methods`.
            threads: Intra-op threads (0 lets the runtime choose).
            batch_size: The batch it will serve: a runtime that compiles for a fixed batch
                compiles for this one (a shorter batch is padded); ``None`` for any batch.
            cache_dir: Where it may keep what it compiles (a folder of the stage cache).
            optimization: ONNX Runtime's graph optimisation level, for runtimes that take it.

        Raises:
            SpecError: It does not run ``method``.
            TrialFailed: It refused the graph.
        """

    @abstractmethod
    def placement(self, session: Any) -> dict[str, int]:
        """What ran where, and in what precision: nodes (or layers) per provider or type.

        Raises:
            TargetUnavailable: The session runs on something other than this runtime.
            TrialFailed: Compute runs off the runtime's first provider.
        """

    @abstractmethod
    def environment(self, session: Any) -> dict[str, Any]:
        """What a measurement in ``session`` ran with: the runtime's version, the provider
        that ran it and the settings that change its speed."""

    def refuse_method(self, method: str) -> None:
        """Raise SpecError where it does not run ``method``."""
        if method not in self.methods:
            raise SpecError(
                f"runtime {self.name!r} does not run method {method!r}; it runs "
                f"{', '.join(self.methods)}"
            )
