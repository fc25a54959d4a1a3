"""``int4-weight``: weight-only 4-bit ``MatMulNBits`` on MatMul and Gemm."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from automl.catalog._registry import Method
from automl.catalog.methods._tools import tool_failure
from automl.errors import UnsupportedQuantization

if TYPE_CHECKING:
    from pathlib import Path

    import onnx

# MatMulNBits blocks are powers of two of at least 16; a weight needs K >= 16 to fill one.
MIN_NBITS_K = 16


class Int4Weight(Method):
    """Weight-only, symmetric 4-bit ``MatMulNBits`` (blocks of 32, or 16 where K is smaller) on
    MatMul and plain Gemm; Conv layers stay fp32."""

    name = "int4-weight"
    bits = 4
    cache_tag = "matmulnbits-s4-block32or16"
    graph = "matmul-nbits"
    legacy = (4, None)
    accuracy_drop = 0.03

    def convert(self, src: Path, dst: Path, calibration: np.ndarray | None) -> None:
        import onnx

        quantizer_class = _quantizer_class()
        model = _gemm_to_matmul(onnx.load(src))
        eligible, excluded = _split_matmuls(model)
        block_size = 32 if all(k >= 32 for k in eligible.values()) else 16
        with tool_failure("onnxruntime MatMulNBitsQuantizer"):
            quantizer = quantizer_class(
                model, bits=4, block_size=block_size, is_symmetric=True, nodes_to_exclude=excluded
            )
            quantizer.process()
            quantized = quantizer.model.model
        if not any(n.op_type == "MatMulNBits" for n in quantized.graph.node):
            raise UnsupportedQuantization(
                "4-bit is weight-only MatMulNBits, and this graph has no eligible MatMul/Gemm "
                f"(a constant 2-D weight with K >= {MIN_NBITS_K}); Conv layers cannot be 4-bit"
            )
        onnx.save(quantized, dst)


def _quantizer_class() -> type:
    """ORT's ``MatMulNBitsQuantizer``, imported without its logging side effects.

    The module calls logging.basicConfig(level=INFO) on import; a placeholder root handler
    makes that a no-op, and its own logger, which reports every node at INFO, is quieted.
    """
    placeholder = logging.NullHandler()
    logging.getLogger().addHandler(placeholder)
    try:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    finally:
        logging.getLogger().removeHandler(placeholder)
    logging.getLogger(MatMulNBitsQuantizer.__module__).setLevel(logging.WARNING)
    return MatMulNBitsQuantizer


def _split_matmuls(model: onnx.ModelProto) -> tuple[dict[str, int], list[str]]:
    """Name every MatMul, and split them into eligible (name → K) and excluded names."""
    weights = {i.name: i for i in model.graph.initializer}
    eligible: dict[str, int] = {}
    excluded: list[str] = []
    for index, node in enumerate(model.graph.node):
        if node.op_type != "MatMul":
            continue
        node.name = node.name or f"matmul_{index}"
        weight = weights.get(node.input[1])
        if weight is not None and len(weight.dims) == 2 and weight.dims[0] >= MIN_NBITS_K:
            eligible[node.name] = weight.dims[0]
        else:
            excluded.append(node.name)
    return eligible, excluded


def _gemm_to_matmul(model: onnx.ModelProto) -> onnx.ModelProto:
    """Rewrite plain ``Gemm`` (torch ``Linear``) as ``MatMul`` + ``Add``, which MatMulNBits takes.

    Only Gemm with alpha = beta = 1, no transA, and constant B (and C, if any) is rewritten;
    others are kept and so stay fp32.
    """
    from onnx import helper, numpy_helper

    weights = {i.name: i for i in model.graph.initializer}
    transposed: dict[str, str] = {}
    nodes: list[onnx.NodeProto] = []
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        plain = (
            node.op_type == "Gemm"
            and attrs.get("alpha", 1.0) == 1.0
            and attrs.get("beta", 1.0) == 1.0
            and not attrs.get("transA", 0)
            and node.input[1] in weights
            and (len(node.input) < 3 or not node.input[2] or node.input[2] in weights)
        )
        if not plain:
            nodes.append(node)
            continue
        kn = node.input[1]
        if attrs.get("transB", 0):
            if kn not in transposed:
                w = np.ascontiguousarray(numpy_helper.to_array(weights[kn]).T)
                transposed[kn] = f"{kn}_kn"
                model.graph.initializer.append(numpy_helper.from_array(w, transposed[kn]))
            kn = transposed[kn]
        name = node.name or f"gemm_{len(nodes)}"
        has_bias = len(node.input) > 2 and node.input[2]
        product = f"{node.output[0]}_matmul" if has_bias else node.output[0]
        nodes.append(
            helper.make_node("MatMul", [node.input[0], kn], [product], name=f"{name}_matmul")
        )
        if has_bias:
            nodes.append(
                helper.make_node(
                    "Add", [product, node.input[2]], [node.output[0]], name=f"{name}_bias"
                )
            )
    model.graph.ClearField("node")
    model.graph.node.extend(nodes)
    return model
