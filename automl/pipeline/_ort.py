"""ONNX Runtime session construction shared by the evaluate and latency stages."""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnxruntime as ort

from automl.pipeline.placement import RECORD_PLACEMENT

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path


def make_session(
    model_path: Path | str,
    providers: Sequence[str],
    intra_op_threads: int,
    provider_options: Mapping[str, Mapping[str, str]] | None = None,
) -> ort.InferenceSession:
    """Open an ORT session on the first available of ``providers`` with pinned threads.

    The session records which provider runs each node (read it with
    :func:`automl.pipeline.placement.node_placements`), and its fallback is disabled: ONNX
    Runtime's Python ``run`` would otherwise retry on the CPU alone after a provider fails,
    and time the CPU in the target's name. Warnings are logged, among them ORT's "nodes were not
    assigned to the preferred execution providers".

    Args:
        model_path: The ONNX file.
        providers: Execution providers in order of preference.
        intra_op_threads: Intra-op thread count (0 lets ORT choose).
        provider_options: Options per provider name, e.g.
            ``{"CUDAExecutionProvider": {"use_tf32": "0"}}``.

    Returns:
        The session. ``get_providers()`` lists the providers it registered; where its nodes
        run is in :func:`automl.pipeline.placement.node_placements`.
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 2  # warnings: unassigned nodes, Memcpy nodes added
    options.add_session_config_entry(RECORD_PLACEMENT, "1")
    available = set(ort.get_available_providers())
    chosen = [p for p in providers if p in available] or ["CPUExecutionProvider"]
    options_of = [dict((provider_options or {}).get(p, {})) for p in chosen]
    session = ort.InferenceSession(
        str(model_path), sess_options=options, providers=chosen, provider_options=options_of
    )
    session.disable_fallback()
    return session


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
