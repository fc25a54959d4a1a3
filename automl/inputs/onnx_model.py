"""A model given as an ONNX graph: deployed as it is, with its batch axis made dynamic.

An ONNX model has no torch weights, so it is neither pruned nor fine-tuned: its study searches
the quantization method, the serving batch and ONNX Runtime's graph optimisation level. The
graph is prepared once per trial: one output (the logits, named by ``model.output`` where the
graph has several) and a batch axis that is dynamic (a graph exported at batch 1 is made so,
then checked by running it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import shape_inference
from onnx.external_data_helper import load_external_data_for_model

from automl.errors import SpecError

BATCH_AXIS = "batch"


@dataclass(frozen=True)
class OnnxModel:
    """The ONNX file, its digest, and which graph output gives the logits (a name or index)."""

    path: Path
    digest: str
    output: str | int | None = None

    def fingerprint(self) -> str:
        """What defines the model: the file's content and the output chosen."""
        return hashlib.sha256(f"onnx|{self.digest}|{self.output!r}".encode()).hexdigest()[:16]

    def prepare(self, out: Path) -> dict:
        """Write the graph to ``out`` with one output and a dynamic batch axis.

        Returns:
            The model's summary, as a trial records it: params and MACs per sample (before
            and after are the same: nothing is pruned) and no training history.

        Raises:
            SpecError: The file changed since it was opened, the graph has other than one
                input, or its logits cannot be chosen.
        """
        model = _load(self.path, self.digest)
        _keep_output(model, self.output, self.path)
        _dynamic_batch(model)
        out.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(out))
        params = float(sum(int(np.prod(init.dims)) for init in model.graph.initializer))
        macs = float(count_macs(model))
        return {
            "macs_before": macs, "params_before": params, "macs_after": macs,
            "params_after": params, "train": [], "finetune": [],
        }  # fmt: skip


def open_onnx(path: str | Path, output: str | int | None = None) -> OnnxModel:
    """The ONNX model at ``path``, after checking that the file exists and reads.

    Raises:
        SpecError: The file is missing or unreadable.
    """
    given = Path(path).expanduser()
    if not given.is_file():
        raise SpecError(f"ONNX model {str(path)!r} does not exist")
    try:
        digest = _digest(given.read_bytes())
    except OSError as e:
        raise SpecError(f"ONNX model {str(path)!r} cannot be read: {e}") from None
    return OnnxModel(given.resolve(), digest, output)


def _digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()[:16]


# onnx 1.23 and newer save at IR version 14 unless told otherwise; ONNX Runtime 1.31 reads 13.
_IR_HINT = (
    "; save it at an IR version that this onnx and ONNX Runtime read: set model.ir_version to "
    "the version named above and onnx.save it again (its opsets stay as they are)"
)


def _load(path: Path, digest: str) -> onnx.ModelProto:
    """The graph in ``path``, whose content must still have ``digest``, checked by onnx."""
    try:
        content = path.read_bytes()
    except OSError as e:
        raise SpecError(f"ONNX model {path.name!r} cannot be read: {e}") from None
    if _digest(content) != digest:  # the bytes parsed below are the bytes checked here
        raise SpecError(
            f"ONNX model {path.name!r} has changed since it was checked (sha256 {digest}...): "
            "a trial never mixes two models; restore it, or start a new study"
        )
    try:
        model = onnx.load_model_from_string(content)
        load_external_data_for_model(model, str(path.parent))  # as onnx.load(path) does
        onnx.checker.check_model(model)
    except (OSError, ValueError, DecodeError, onnx.checker.ValidationError) as e:
        hint = _IR_HINT if "ir_version" in str(e) else ""
        raise SpecError(f"ONNX model {path.name!r} is not a valid ONNX graph: {e}{hint}") from None
    initializers = {init.name for init in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in initializers]
    if len(inputs) != 1:
        raise SpecError(
            f"ONNX model {path.name!r} takes inputs {inputs}; automl feeds one (the samples)"
        )
    return model


def _keep_output(model: onnx.ModelProto, output: str | int | None, path: Path) -> None:
    """Keep the graph output that gives the logits; ONNX Runtime skips what only fed others."""
    names = [o.name for o in model.graph.output]
    if output is None and len(names) == 1:
        return
    if output is None:
        raise SpecError(
            f"ONNX model {path.name!r} has outputs {names}; name its logits with model.output "
            "(--model-output), a name or an index"
        )
    index = output if isinstance(output, int) else names.index(output) if output in names else -1
    if not 0 <= index < len(names):
        raise SpecError(f"model.output {output!r} is not an output of {path.name!r}: {names}")
    kept = model.graph.output[index]
    del model.graph.output[:]
    model.graph.output.append(kept)
    _drop_unused(model.graph)


def _drop_unused(graph: onnx.GraphProto) -> None:
    """Drop the nodes and initializers that no graph output needs, e.g. the softmax of an
    output left out: a cast to fp16 would still type them, and fail on the output they lost."""
    needed = {o.name for o in graph.output}
    kept = []
    for node in reversed(graph.node):
        if not needed.intersection(node.output):
            continue
        kept.append(node)
        needed.update(node.input)
        for attribute in node.attribute:  # If, Loop, Scan: what their bodies read
            for body in (attribute.g, *attribute.graphs):
                needed.update(name for inner in body.node for name in inner.input)
    del graph.node[:]
    graph.node.extend(reversed(kept))
    initializers = [i for i in graph.initializer if i.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(initializers)


def _dynamic_batch(model: onnx.ModelProto) -> None:
    """Make the first axis of the input and the output symbolic, where it is fixed."""
    initializers = {init.name for init in model.graph.initializer}
    values = [i for i in model.graph.input if i.name not in initializers]
    for value in (*values, *model.graph.output):
        dims = value.type.tensor_type.shape.dim
        if dims and not dims[0].dim_param:
            dims[0].dim_param = BATCH_AXIS


def count_macs(model: onnx.ModelProto) -> int:
    """Multiply-accumulates of one sample through Conv, Gemm and MatMul nodes, from the
    shapes ONNX infers at batch 1 (nodes whose shapes it cannot infer count 0)."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for value in (*fixed.graph.input, *fixed.graph.output):
        dims = value.type.tensor_type.shape.dim
        if dims and dims[0].dim_param:
            dims[0].dim_value = 1
    shapes = _shapes(shape_inference.infer_shapes(fixed))
    total = 0
    for node in fixed.graph.node:
        out = shapes.get(node.output[0]) if node.output else None
        ins = [shapes.get(name) for name in node.input]
        if out is None or not ins or ins[0] is None:
            continue
        if node.op_type == "Conv" and len(ins) > 1 and ins[1] is not None:
            total += int(np.prod(out)) * int(np.prod(ins[1][1:]))
        elif node.op_type in ("Gemm", "MatMul"):
            transposed = any(a.name == "transA" and a.i for a in node.attribute)
            inner = ins[0][0] if transposed and len(ins[0]) == 2 else ins[0][-1]
            total += int(np.prod(out)) * int(inner)
    return total


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """The static shapes ONNX knows, by value name (initializers included)."""
    shapes = {i.name: tuple(i.dims) for i in model.graph.initializer}
    graph = model.graph
    for value in (*graph.input, *graph.value_info, *graph.output):
        dims = value.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = tuple(d.dim_value for d in dims)
    return shapes
