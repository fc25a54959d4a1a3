"""ONNX Runtime's runtimes: a session on execution providers, with their options.

:class:`OrtBackend` implements the runtime contract (:class:`automl.catalog.Backend`) for an
ordered set of ONNX Runtime execution providers; ``ort_cpu.py``, ``ort_cuda.py`` and
``ort_tensorrt.py`` are its entries. Sessions come from :func:`automl.catalog.runtimes._ort.
make_session` (fallback off, placement recorded).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from automl.catalog.runtimes._base import Backend
from automl.errors import TargetUnavailable, TrialFailed

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    import onnxruntime as ort


class OrtBackend(Backend):
    """A runtime of ONNX Runtime execution providers.

    Attributes:
        providers: The session's execution providers, in order; compute nodes must run on
            the first (see :func:`automl.catalog.runtimes._placement.check_placement`).
        placed_ops: Operators that, beside compute (see
            :func:`automl.catalog.runtimes._placement.is_compute`), must run on the first
            provider.
        session_options: Options per provider that every session of it takes.
        graph_options: Options per provider that replay runs as a CUDA graph.
    """

    profiles = True
    package = "onnxruntime"
    placed_ops: ClassVar[tuple[str, ...]] = ()
    session_options: ClassVar[Mapping[str, Mapping[str, str]]] = MappingProxyType({})
    graph_options: ClassVar[Mapping[str, Mapping[str, str]]] = MappingProxyType({})

    def unavailable(self) -> str | None:
        """``None`` where this ONNX Runtime build lists the first provider."""
        import onnxruntime as ort

        if self.provider in ort.get_available_providers():
            return None
        return (
            f"ONNX Runtime {ort.__version__} here has no {self.provider}; install: {self.install}"
        )

    def open_session(
        self,
        model_path: Path | str,
        method: str,
        *,
        threads: int,
        batch_size: int | None = None,
        cache_dir: Path | None = None,
        optimization: str = "all",
        cuda_graph: bool = False,
        profile_prefix: str | None = None,
    ) -> ort.InferenceSession:
        """A session on :attr:`providers` with :meth:`provider_options` (any batch); with
        ``cuda_graph``, replayed as a CUDA graph; with ``profile_prefix``, ONNX Runtime's
        profiler writes its trace there."""
        from automl.catalog import get_method
        from automl.catalog.runtimes._ort import ORT_ERRORS, make_session

        options = self.provider_options(method, cache_dir, cuda_graph=cuda_graph)
        unsafe = get_method(method).unsafe_rewrites
        try:
            return make_session(
                model_path, self.providers, threads, options, unsafe, optimization, profile_prefix
            )
        except ORT_ERRORS as e:  # e.g. a TensorRT engine that does not build
            raise TrialFailed(
                f"ONNX Runtime could not open this {method} graph on {self.provider}"
                f"{' as a CUDA graph' if cuda_graph else ''}: {type(e).__name__}: {e}"
            ) from e

    def placement(self, session: ort.InferenceSession) -> dict[str, int]:
        """Nodes per execution provider, from the session's own record."""
        from automl.catalog.runtimes._placement import (
            check_copies,
            check_placement,
            node_placements,
        )

        provider = session.get_providers()[0]
        if provider != self.provider:
            raise TargetUnavailable(f"this session runs the model on {provider}")
        placements = node_placements(session)
        counts = check_placement(placements, self.provider, self.placed_ops)
        check_copies(placements, len(session.get_inputs()), len(session.get_outputs()))
        return dict(counts)

    def environment(self, session: ort.InferenceSession) -> dict[str, Any]:
        """ONNX Runtime's version, the provider that ran the session, and that provider's
        options as the session reports them (``provider_options``)."""
        import onnxruntime as ort

        provider = session.get_providers()[0]
        options = session.get_provider_options().get(provider)
        return {"onnxruntime": ort.__version__, "provider": provider, "provider_options": options}

    def provider_options(
        self, method: str, cache_dir: Path | None = None, *, cuda_graph: bool = False
    ) -> dict[str, dict[str, str]]:
        """Options per provider for a session of a ``method`` graph.

        Args:
            method: The graph's quantization method; it must be one of :attr:`methods`.
            cache_dir: Where the provider may keep compiled engines (a folder of the stage
                cache); ``None`` builds every engine anew.
            cuda_graph: Replay runs as a CUDA graph (device-resident timing only).

        Raises:
            SpecError: The runtime does not run ``method``.
        """
        from automl.catalog import get_method

        self.refuse_method(method)
        layers = [self.session_options, get_method(method).provider_options]
        layers += [self.graph_options] if cuda_graph else []
        layers += [self.cache_options(cache_dir)] if cache_dir is not None else []
        merged = {p: {k: v for layer in layers for k, v in layer.get(p, {}).items()}
                  for p in self.providers}  # fmt: skip
        return {p: options for p, options in merged.items() if options}

    def runs_cuda_graph(self, reported: Mapping[str, Mapping[str, str]]) -> bool:
        """Whether a session's own provider options (``get_provider_options()``) turn on every
        one of :attr:`graph_options`: the session's state, not the options asked for."""
        on = {"1", "true"}
        return bool(self.graph_options) and all(
            str(reported.get(p, {}).get(key, "")).lower() in on
            for p, options in self.graph_options.items()
            for key in options
        )

    def cache_options(self, cache_dir: Path) -> Mapping[str, Mapping[str, str]]:
        """Options per provider that keep compiled engines in ``cache_dir``; none by default."""
        return {}
