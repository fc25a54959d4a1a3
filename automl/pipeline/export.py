"""Export stage: ONNX with a dynamic batch axis, checked and compared against torch.

The graph's input is float32 for float data and int64 for token ids; the other axes, e.g. a
sequence's length, are the data's and fixed.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import torch

from automl.errors import TrialFailed
from automl.pipeline._ort import input_name, make_session, model_dtype

if TYPE_CHECKING:
    from torch import nn

INPUT_NAME = "input"
OUTPUT_NAME = "logits"
OPSET = 17


@dataclass(frozen=True)
class ExportResult:
    """The ONNX file and the largest difference from torch on the sample."""

    path: Path
    max_abs_diff: float


def export_onnx(
    model: nn.Module, sample: np.ndarray, path: Path | str, *, atol: float = 1e-4
) -> ExportResult:
    """Export ``model`` to ONNX and verify it.

    Args:
        model: The model, exported in eval mode on CPU.
        sample: Real inputs (N, *input_shape), used to trace and to compare outputs: floats
            (the graph's input is float32) or integer token ids (int64).
        path: Where to write the ``.onnx`` file.
        atol: Largest allowed absolute difference between ORT and torch logits.

    Returns:
        The path and the measured difference.

    Raises:
        TrialFailed: The graph fails ``onnx.checker`` or its outputs differ from torch.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = model.cpu().eval()
    inputs = torch.from_numpy(np.ascontiguousarray(sample, dtype=model_dtype(sample)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the plainer TorchScript exporter
        torch.onnx.export(
            model,
            (inputs[:1],),
            str(path),
            dynamo=False,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            opset_version=OPSET,
        )
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except onnx.checker.ValidationError as e:
        raise TrialFailed(f"exported ONNX graph is invalid: {e}") from e
    with torch.no_grad():
        expected = model(inputs).numpy()
    session = make_session(path, ["CPUExecutionProvider"], 1)
    actual = session.run(None, {input_name(session): inputs.numpy()})[0]
    diff = float(np.abs(actual - expected).max())
    if not diff <= atol:
        raise TrialFailed(f"ONNX outputs differ from torch by {diff:.2e} (allowed {atol:.0e})")
    return ExportResult(path=path, max_abs_diff=diff)
