"""ONNX Runtime session construction shared by the evaluate and latency stages."""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnxruntime as ort

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path


def make_session(
    model_path: Path | str, providers: Sequence[str], intra_op_threads: int
) -> ort.InferenceSession:
    """Open an ORT session on the first available of ``providers`` with pinned threads.

    Args:
        model_path: The ONNX file.
        providers: Execution providers in order of preference.
        intra_op_threads: Intra-op thread count (0 lets ORT choose).

    Returns:
        The session. Its ``get_providers()`` says which provider really runs it.
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    available = set(ort.get_available_providers())
    chosen = [p for p in providers if p in available] or ["CPUExecutionProvider"]
    return ort.InferenceSession(str(model_path), sess_options=options, providers=chosen)


def open_session(
    model: Path | str | ort.InferenceSession, providers: Sequence[str], intra_op_threads: int
) -> ort.InferenceSession:
    """``model`` itself if it is a session already, else :func:`make_session` on the file."""
    if isinstance(model, ort.InferenceSession):
        return model
    return make_session(model, providers, intra_op_threads)


def input_name(session: ort.InferenceSession) -> str:
    """Name of the model's single input."""
    return session.get_inputs()[0].name
