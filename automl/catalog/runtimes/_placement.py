"""Where a session's nodes run, and the check that compute runs on the target's provider.

``session.get_providers()`` lists the providers a session registered, not where its nodes
run: on a CUDA target an int8 dynamic graph registers the CUDA provider and still runs its
``ConvInteger`` and ``DynamicQuantizeLinear`` nodes on the CPU, because the CUDA provider has
no kernels for them. Sessions from :func:`automl.catalog.runtimes._ort.make_session` record each node's
provider (``session.record_ep_graph_assignment_info``); this module reads that record
(``get_provider_graph_assignment_info()``), counts nodes per provider, and fails a trial whose
compute nodes run anywhere but on the target's first provider: a layer's arithmetic, and the
pooling, normalisation, softmax and activation between layers, whose place on the CPU would put
two copies between host and device around them. Data movement, shape and index nodes (Memcpy,
Cast, Reshape, Gather, elementwise arithmetic on shapes, ...) may run elsewhere: ONNX Runtime
places some on the CPU on purpose. The record names no node's inputs, so a Memcpy at the graph's
edge cannot be told from one inside it by name; but ONNX Runtime copies each graph input to the
device and each output back at most once, so more ``MemcpyFromHost`` nodes than the graph has
inputs, or more ``MemcpyToHost`` than outputs, are copies inside it (see
:func:`check_copies`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from automl.errors import AutomlError, TrialFailed

if TYPE_CHECKING:
    from collections.abc import Sequence

    import onnxruntime as ort

RECORD_PLACEMENT = "session.record_ep_graph_assignment_info"
_SHOWN_NODES = 10  # nodes named in a failure message; the rest are counted


@dataclass(frozen=True)
class NodePlacement:
    """One node of a session's graph and the execution provider that runs it."""

    provider: str
    op_type: str
    name: str


# Operators between layers that compute on a whole activation: on the CPU, each would cost a
# copy to the host and one back.
_BETWEEN_LAYERS = frozenset(
    {
        "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool",
        "BatchNormalization", "LayerNormalization", "SkipLayerNormalization",
        "SimplifiedLayerNormalization", "InstanceNormalization", "GroupNormalization",
        "Softmax", "LogSoftmax", "Relu", "LeakyRelu", "Gelu", "FastGelu", "BiasGelu", "Sigmoid",
        "Tanh", "HardSigmoid", "HardSwish", "Elu", "Selu", "Softplus", "Attention",
        "MultiHeadAttention",
    }
)  # fmt: skip


def is_compute(op_type: str) -> bool:
    """Whether an operator computes on activations, and so must run on the target's provider.

    Covers Conv, Gemm and MatMul in all their forms: fused (``FusedConv``, ``FusedMatMul``),
    quantized (``QLinearConv``, ``QLinearMatMul``, ``ConvInteger``, ``MatMulInteger``,
    ``DynamicQuantizeMatMul``, ``QGemm``) and weight-only (``MatMulNBits``); and the pooling,
    normalisation, softmax, activation and attention operators between layers, quantized
    (``QLinearAveragePool``, ...) or not.
    """
    return (
        any(core in op_type for core in ("Conv", "Gemm", "MatMul"))
        or op_type.endswith("Integer")
        or op_type.startswith("QLinear")
        or op_type in _BETWEEN_LAYERS
    )


def node_placements(session: ort.InferenceSession) -> tuple[NodePlacement, ...]:
    """Every node of ``session`` with the provider it was assigned to.

    Args:
        session: A session opened with :data:`RECORD_PLACEMENT` set to ``"1"``, as
            :func:`automl.catalog.runtimes._ort.make_session` does.

    Returns:
        One record per node, in ONNX Runtime's order. Unnamed nodes are named
        ``<op_type>#<index>``.

    Raises:
        AutomlError: The session was opened without recording placement.
    """
    try:
        recorded = session.get_session_options().get_session_config_entry(RECORD_PLACEMENT)
    except RuntimeError:  # the entry was never set
        recorded = None
    if recorded != "1":
        raise AutomlError(
            f"this session does not record node placement; open it with "
            f"automl.catalog.runtimes._ort.make_session (session option {RECORD_PLACEMENT}=1)"
        )
    placements = []
    for subgraph in session.get_provider_graph_assignment_info():
        for node in subgraph.get_nodes():
            name = node.name or f"{node.op_type}#{len(placements)}"
            placements.append(NodePlacement(subgraph.ep_name, node.op_type, name))
    return tuple(placements)


def placement_counts(placements: Sequence[NodePlacement]) -> dict[str, int]:
    """Nodes per execution provider, e.g. ``{"CUDAExecutionProvider": 40, ...}``, sorted."""
    return dict(sorted(Counter(p.provider for p in placements).items()))


def check_copies(placements: Sequence[NodePlacement], inputs: int, outputs: int) -> None:
    """Fail on copies between host and device inside the graph.

    Args:
        placements: A session's nodes (see :func:`node_placements`).
        inputs: The graph's inputs, each of which may be copied to the device once.
        outputs: Its outputs, each of which may be copied back once.

    Raises:
        TrialFailed: More ``MemcpyFromHost`` nodes than inputs, or ``MemcpyToHost`` than outputs:
            part of the graph runs on the host between device nodes.
    """
    counts = Counter(p.op_type for p in placements)
    inside = {
        op: counts[op] - edge
        for op, edge in (("MemcpyFromHost", inputs), ("MemcpyToHost", outputs))
        if counts[op] > edge
    }
    if inside:
        shown = ", ".join(f"{n} {op}" for op, n in inside.items())
        raise TrialFailed(
            f"{shown} node(s) copy between host and device inside the graph ({inputs} input(s), "
            f"{outputs} output(s)): some nodes between device nodes run on the host, and every "
            "run would pay those copies. Its latency would not be the target's"
        )


def check_placement(
    placements: Sequence[NodePlacement], provider: str, placed_ops: Sequence[str] = ()
) -> dict[str, int]:
    """Fail unless every compute node, and every node of ``placed_ops``, runs on ``provider``.

    Args:
        placements: A session's nodes (see :func:`node_placements`).
        provider: The provider the target measures, its first execution provider.
        placed_ops: More operators that must run there (a backend's ``placed_ops``: Q/DQ on
            TensorRT).

    Returns:
        Nodes per provider (see :func:`placement_counts`), for the trial's environment.

    Raises:
        TrialFailed: Some of those nodes (see :func:`is_compute`) run on another provider. The
            message names the nodes, their operators and providers.
    """
    placed = [p for p in placements if is_compute(p.op_type) or p.op_type in placed_ops]
    stray = [p for p in placed if p.provider != provider]
    if stray:
        shown = ", ".join(f"{p.op_type} {p.name!r} on {p.provider}" for p in stray[:_SHOWN_NODES])
        more = f" and {len(stray) - _SHOWN_NODES} more" if len(stray) > _SHOWN_NODES else ""
        kind = " or ".join(("compute", *placed_ops))
        raise TrialFailed(
            f"{len(stray)} {kind} node(s) do not run on {provider}: {shown}{more}. Its "
            "latency would not be the target's; this provider lacks kernels for this graph "
            "(a quantization method the target should not list?)"
        )
    return placement_counts(placements)
