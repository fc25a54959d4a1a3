"""Where a graph's time goes, per operator and per layer, from ONNX Runtime's profiler.

:func:`profile_graph` runs a graph on its target's backend with the profiler on and gives the
mean time per run of every node of the session's optimised graph. :func:`layer_times` gives
that time back to the layers (Conv, Gemm, MatMul) of the source graph: a node that ONNX Runtime
fused or converted keeps the name of the node or tensor it came from, and a QuantizeLinear or
DequantizeLinear goes to the layer that its tensor feeds. :func:`op_times` sums it per
operator, and :func:`explain_no_gain` says in a sentence where a quantized graph's time went.
On TensorRT, which ONNX Runtime's profiler sees as one node, :func:`engine_layer_times` gives
the times of the engine's own layers back to the source graph's the same way.

The profiler times each node on the host: on a GPU provider that is the node's launch and
synchronisation, not its kernel alone.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from automl.catalog import LAYER_OPS
from automl.catalog.runtimes._ort import feed, input_dtype, input_name
from automl.pipeline.timers import backend_session

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from automl.targets import Target

QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "Cast"})
LAYOUT_OPS = frozenset({"Transpose", "ReorderInput", "ReorderOutput"})
OTHER = "other"  # time of nodes that belong to no layer (layout changes, pooling, the input's)
_RUNS = 10
_SUFFIXES = re.compile(r"(_kernel_time|_token_\d+|_nchwc)+$")
# What may be a node's or a tensor's name in a TensorRT layer's name, and what TensorRT appends
# to a node's name in a copy of it.
_ENGINE_TOKEN = re.compile(r"[^\s+(),\[\]{}]+")
_NODE_SUFFIXES = re.compile(r"(_clone_\d+)+$")


@dataclass(frozen=True)
class NodeTime:
    """One node of a session's optimised graph: its name, its operator and ms per run."""

    name: str
    op: str
    ms: float


def profile_graph(
    model_path: Path,
    target: Target,
    method: str,
    x: np.ndarray,
    batch_size: int,
    *,
    optimization: str = "all",
    runs: int = _RUNS,
) -> list[NodeTime]:
    """The mean time per run of every node of ``model_path`` on ``method``'s backend.

    One untimed run comes first; the batch is the first ``batch_size`` samples of ``x``
    (repeated where ``x`` is shorter).
    """
    with tempfile.TemporaryDirectory(prefix="automl-profile-") as tmp:
        session = backend_session(
            model_path, target, method, optimization=optimization,
            profile_prefix=str(Path(tmp) / "profile"),
        )  # fmt: skip
        batch = feed(np.take(x, np.arange(batch_size) % len(x), axis=0), input_dtype(session))
        feeds = {input_name(session): batch}
        for _ in range(runs + 1):
            session.run(None, feeds)
        trace = json.loads(Path(session.end_profiling()).read_text())
    return _node_times(trace, runs)


def _node_times(trace: list[dict], runs: int) -> list[NodeTime]:
    """Mean ms per run of each node, in the order the graph ran them, after the first run
    (every run, where the trace marks none)."""
    runs_seen = [e for e in trace if e.get("name") == "model_run"]
    first = min(runs_seen, key=lambda e: e["ts"], default=None)
    start = first["ts"] + first["dur"] if first else float("-inf")
    runs = runs if first else runs + 1
    total: dict[str, float] = defaultdict(float)
    ops: dict[str, str] = {}
    for event in trace:
        if event.get("cat") != "Node" or not event["name"].endswith("_kernel_time"):
            continue
        if event["ts"] >= start:
            total[event["name"]] += event["dur"] / 1e3
            ops[event["name"]] = event.get("args", {}).get("op_name", "?")
    return [NodeTime(_SUFFIXES.sub("", name), ops[name], ms / runs) for name, ms in total.items()]


def op_times(nodes: Iterable[NodeTime]) -> dict[str, float]:
    """Ms per run of each operator, the slowest first."""
    total: Counter[str] = Counter()
    for node in nodes:
        total[node.op] += node.ms
    return dict(total.most_common())


def quantizes_nothing(graph: SourceGraph) -> bool:
    """Whether a graph has no QuantizeLinear: a per-layer method that kept every layer in fp32
    (``keep_fp32`` at or above its model's layer count) made the fp32 graph."""
    return not any(node.op_type == "QuantizeLinear" for node in graph.nodes.values())


class SourceGraph:
    """The layers of an fp32 ONNX graph, and which of them each profiled node belongs to."""

    def __init__(self, path: Path) -> None:
        graph = onnx.load(str(path), load_external_data=False).graph
        self.nodes = {node.name: node for node in graph.node}
        self.producer = {out: node for node in graph.node for out in node.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        for node in graph.node:
            for name in node.input:
                self.consumers[name].append(node)
        self.layers = {n.name: _kind(n) for n in graph.node if n.op_type in LAYER_OPS}

    def layer_of(self, node: NodeTime) -> str:
        """The layer a profiled node belongs to, or :data:`OTHER`."""
        for op in ("QuantizeLinear", "DequantizeLinear"):
            if node.name.endswith(f"_{op}"):
                tensor = node.name.removesuffix(f"_{op}")
                return self._below(tensor) or self._above(self.producer.get(tensor)) or OTHER
        source = self.nodes.get(node.name) or self.producer.get(node.name)
        return self._above(source) or OTHER

    def _above(self, node: onnx.NodeProto | None, steps: int = 4) -> str | None:
        """The layer that ``node`` is, or that feeds it through at most ``steps`` others."""
        while node is not None and steps:
            if node.name in self.layers:
                return node.name
            node = next((self.producer[i] for i in node.input if i in self.producer), None)
            steps -= 1
        return None

    def _below(self, tensor: str, steps: int = 4) -> str | None:
        """The first layer that ``tensor`` feeds, through at most ``steps`` other nodes."""
        frontier = [tensor]
        for _ in range(steps):
            nodes = [n for t in frontier for n in self.consumers.get(t, [])]
            layer = next((n.name for n in nodes if n.name in self.layers), None)
            if layer or not nodes:
                return layer
            frontier = [out for n in nodes for out in n.output]
        return None


def _kind(node: onnx.NodeProto) -> str:
    """A layer's kind in words: its operator, ``depthwise Conv`` for a grouped convolution."""
    group = next((a.i for a in node.attribute if a.name == "group"), 1)
    return f"depthwise {node.op_type}" if node.op_type == "Conv" and group > 1 else node.op_type


def layer_times(graph: SourceGraph, nodes: Iterable[NodeTime]) -> dict[str, float]:
    """Ms per run of each layer of ``graph`` (and :data:`OTHER`), from a profile of it or of
    its quantized form."""
    total: dict[str, float] = dict.fromkeys(graph.layers, 0.0)
    for node in nodes:
        key = graph.layer_of(node)
        total[key] = total.get(key, 0.0) + node.ms
    return total


@dataclass(frozen=True)
class EngineLayer:
    """One layer of a TensorRT engine (see :mod:`automl.pipeline.trt_engine`).

    Attributes:
        name: Its name in the engine (the inspector's and the profiler's).
        nodes: The ONNX nodes that its metadata names (``[ONNX Layer: ...]``, TensorRT 10).
        data_type: The type its first input takes, for a compute layer.
        ms: Its time per run, where it was profiled.
    """

    name: str
    nodes: tuple[str, ...] = ()
    data_type: str | None = None
    ms: float = 0.0


def engine_layer_of(graph: SourceGraph, layer: EngineLayer) -> list[str]:
    """The layers of ``graph`` that a TensorRT engine layer computes.

    Read from the ONNX nodes its metadata names, then from its name: TensorRT names a fused
    layer by its ONNX nodes joined with `` + `` (``/f.0/Conv + /f.1/Relu``), a pointwise fusion
    ``PWN(...)``, a reformat "Reformatting CopyNode for Input Tensor 0 to <layer>"; a Myelin
    layer's name (``/f_0/Conv_myl0_3``) is no node's, so it needs the metadata. The layers named
    are those; where none is, the layer of the first node that belongs to one (a Q/DQ node, the
    Relu after a Conv); else none.
    """
    tokens = [_NODE_SUFFIXES.sub("", token).removeprefix("node_of_")
              for token in (*layer.nodes, *_ENGINE_TOKEN.findall(layer.name))]  # fmt: skip
    named = list(dict.fromkeys(t for t in tokens if t in graph.layers))
    if named:
        return named
    layers = (graph.layer_of(NodeTime(token, "", 0.0)) for token in tokens)
    return next(([layer] for layer in layers if layer != OTHER), [])


def engine_layer_times(graph: SourceGraph, layers: Iterable[EngineLayer]) -> dict[str, float]:
    """Ms per run of each layer of ``graph`` (and :data:`OTHER`), from the times of its TensorRT
    engine's layers (:func:`automl.pipeline.trt_engine.profile_engine`); an engine layer that
    computes several layers of the graph is shared out evenly among them."""
    total: dict[str, float] = dict.fromkeys(graph.layers, 0.0)
    for layer in layers:
        mine = engine_layer_of(graph, layer) or [OTHER]
        for name in mine:
            total[name] = total.get(name, 0.0) + layer.ms / len(mine)
    return total


def explain_no_gain(
    graph: SourceGraph, quantized: Sequence[NodeTime], fp32: Sequence[NodeTime], gain: float
) -> str:
    """Where a quantized graph that is not faster than its fp32 form spends its time.

    Names the kinds of layer that quantization made slower (each with the Q/DQ and layout
    nodes that serve it), and the share of the graph's time in quantize, dequantize and cast
    nodes and in layout changes. Profiled times carry the profiler's own cost per node, so
    they explain; the gain, measured without it, decides.

    Args:
        graph: The fp32 source graph.
        quantized: The profile of the quantized graph.
        fp32: The profile of the fp32 graph, at the same batch.
        gain: The fp32 latency over the quantized one, measured side by side.
    """
    kinds = {
        name: _by_kind(graph, layer_times(graph, nodes))
        for name, nodes in (("quantized", quantized), ("fp32", fp32))
    }
    slower = sorted(
        ((k, q, kinds["fp32"].get(k, 0.0)) for k, q in kinds["quantized"].items()),
        key=lambda row: row[2] - row[1],
    )
    parts = [f"quantized but not faster (gain {gain:.2f}×)"]
    for kind, q, f in slower:
        if q > f:
            n = _count_of(graph, kind)
            verb = "takes" if n == 1 else "take"
            parts.append(f"its {n} {kind} {verb} {q:.3g} ms a run against {f:.3g} ms in fp32")
    total = sum(n.ms for n in quantized) or 1e-12
    qdq = sum(n.ms for n in quantized if n.op in QDQ_OPS)
    layout = sum(n.ms for n in quantized if n.op in LAYOUT_OPS)
    parts.append(f"quantize, dequantize and cast nodes take {qdq / total:.0%} of its time")
    if layout:
        parts.append(f"layout changes {layout / total:.0%}")
    return "; ".join(parts)


def _count_of(graph: SourceGraph, kind: str) -> int:
    """How many layers of ``graph`` are of ``kind``."""
    return sum(k == kind for k in graph.layers.values())


def _by_kind(graph: SourceGraph, times: dict[str, float]) -> dict[str, float]:
    """Layer times summed per kind of layer (:data:`OTHER` left out)."""
    total: dict[str, float] = defaultdict(float)
    for name, ms in times.items():
        if name != OTHER:
            total[graph.layers[name]] += ms
    return dict(total)
