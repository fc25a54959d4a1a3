"""Tiny ONNX graphs for tests that need a real model to run, not a trained one."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

if TYPE_CHECKING:
    from pathlib import Path


def tiny_matmul(path: Path) -> Path:
    """Save a (batch, 4) -> (batch, 3) MatMul graph of ones to ``path``, and return it."""
    weights = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "w"], ["output"])], "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 3])], [weights],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, path)
    return path
