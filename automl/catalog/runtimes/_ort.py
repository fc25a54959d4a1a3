"""ONNX Runtime sessions, and the arrays they are fed, shared by the pipeline stages.

A graph's input is float32 (or float16, or float64) for features and int64 for token ids;
:func:`feed` casts a caller's array to it, and refuses to turn floats into ids or back.
"""

from __future__ import annotations

import os
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as _state

from automl.catalog.runtimes._ort_packages import load_gpu_libraries
from automl.catalog.runtimes._placement import RECORD_PLACEMENT
from automl.errors import SpecError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

# ONNX Runtime's own errors (they derive from Exception alone), and RuntimeError for the C++
# exceptions of a provider: a session or run it refused.
ORT_ERRORS = (
    *(_state.Fail, _state.RuntimeException, _state.EPFail, _state.NotImplemented),
    *(_state.InvalidArgument, _state.InvalidGraph, _state.EngineError, RuntimeError),
)


# ONNX Runtime's input types, as numpy dtypes.
ORT_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}


# ONNX Runtime's graph optimisation levels, by the name a search space gives them.
GRAPH_OPTIMIZATIONS = MappingProxyType(
    {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
)


def make_session(
    model_path: Path | str,
    providers: Sequence[str],
    intra_op_threads: int,
    provider_options: Mapping[str, Mapping[str, str]] | None = None,
    disabled_optimizers: Sequence[str] = (),
    optimization: str = "all",
    profile_prefix: str | None = None,
) -> ort.InferenceSession:
    """Open an ORT session on the first available of ``providers`` with pinned threads.

    The session records which provider runs each node (read it with
    :func:`automl.catalog.runtimes._placement.node_placements`), and its fallback is disabled, from its
    creation on: ONNX Runtime's Python session would otherwise start again on the fallback
    providers, without their options, when a provider fails to start (a TensorRT engine that
    does not build, an option it refuses), and its ``run`` would retry on the CPU alone after
    a provider fails: either would time another provider in the target's name. The error is
    raised instead. Warnings are logged, among them ORT's "nodes were not assigned to the
    preferred execution providers".

    Args:
        model_path: The ONNX file.
        providers: Execution providers in order of preference.
        intra_op_threads: Intra-op thread count (0 lets ORT choose).
        provider_options: Options per provider name (a backend's: see
            :meth:`automl.catalog.Backend.provider_options`).
        disabled_optimizers: Graph rewrites to leave out (a method's ``unsafe_rewrites``).
        optimization: The graph optimisation level, a key of :data:`GRAPH_OPTIMIZATIONS`.
        profile_prefix: Where ONNX Runtime's profiler writes its trace (the session's
            ``end_profiling`` returns the file); no profiling without it.

    Returns:
        The session. ``get_providers()`` lists the providers it registered; where its nodes
        run is in :func:`automl.catalog.runtimes._placement.node_placements`.
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = GRAPH_OPTIMIZATIONS[optimization]
    options.log_severity_level = 2  # warnings: unassigned nodes, Memcpy nodes added
    options.add_session_config_entry(RECORD_PLACEMENT, "1")
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    available = set(ort.get_available_providers())
    chosen = [p for p in providers if p in available] or ["CPUExecutionProvider"]
    if chosen != ["CPUExecutionProvider"]:
        load_gpu_libraries()  # the providers' libraries have no RUNPATH of their own
    options_of = [dict((provider_options or {}).get(p, {})) for p in chosen]
    session = ort.InferenceSession(
        str(model_path), sess_options=options, providers=chosen, provider_options=options_of,
        disabled_optimizers=list(disabled_optimizers), enable_fallback=0,
    )  # fmt: skip
    session.disable_fallback()  # ONNX Runtime builds without the enable_fallback argument
    return session


def open_session(
    model: Path | str | ort.InferenceSession, providers: Sequence[str], intra_op_threads: int
) -> ort.InferenceSession:
    """``model`` itself if it is a session already, else :func:`make_session` on the file."""
    if not isinstance(model, (str, os.PathLike)):  # a session already
        return model
    return make_session(model, providers, intra_op_threads)


def input_name(session: ort.InferenceSession) -> str:
    """Name of the model's single input."""
    return session.get_inputs()[0].name


def input_dtype(session: ort.InferenceSession) -> type:
    """The numpy dtype of the session's single input.

    Raises:
        SpecError: The input's type is none of :data:`ORT_DTYPES`.
    """
    kind = session.get_inputs()[0].type
    if kind not in ORT_DTYPES:
        raise SpecError(
            f"model input type {kind} is not supported; expected one of {sorted(ORT_DTYPES)}"
        )
    return ORT_DTYPES[kind]


def model_dtype(x: np.ndarray) -> type:
    """The dtype a model takes ``x`` in: int64 for integer token ids, else float32."""
    return np.int64 if np.issubdtype(np.asarray(x).dtype, np.integer) else np.float32


def feed(x: np.ndarray, dtype: type) -> np.ndarray:
    """``x`` as a contiguous array of the graph input's ``dtype``.

    Raises:
        SpecError: ``x`` is float and the graph takes integers (token ids), or the reverse.
    """
    x = np.asarray(x)
    if np.issubdtype(x.dtype, np.integer) != np.issubdtype(dtype, np.integer):
        raise SpecError(
            f"the model's input is {np.dtype(dtype).name} and the data is {x.dtype.name}: "
            "token ids (integers) and features (floats) do not mix"
        )
    return np.ascontiguousarray(x, dtype=dtype)
