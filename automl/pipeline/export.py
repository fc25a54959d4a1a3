"""Export stage: ONNX with a dynamic batch axis, checked and compared against torch.

The graph's input is float32 for float data and int64 for token ids; the other axes, e.g. a
sequence's length, are the data's and fixed.

Parity is judged relative to the scale of the logits, as PyTorch's and ONNX Runtime's own tests
judge two float32 runtimes: each logit within ``atol + rtol * scale`` (``ATOL`` and ``RTOL``),
where ``scale`` is the largest ``|torch logit|`` of its sample, so that a model with large
logits is refused neither for the scale of its numbers nor for a logit near zero that
cancellation leaves with the rounding of its large terms; and the same predicted class on every
sample but near-ties: samples whose top two logits torch separates by less than twice a tenth
of that tolerance (two float32 runtimes differ by far less; a flip beyond that is an error even
where each logit stays within its tolerance).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import torch

from automl.catalog.runtimes._ort import input_name, make_session, model_dtype
from automl.errors import TrialFailed

if TYPE_CHECKING:
    from torch import nn

INPUT_NAME = "input"
OUTPUT_NAME = "logits"
OPSET = 17
# |ort - torch| <= ATOL + RTOL * max |torch| of the sample (torch.onnx.verification's rtol).
RTOL = 1e-3
ATOL = 1e-4


@dataclass(frozen=True)
class ExportResult:
    """The ONNX file and the largest difference from torch on the sample."""

    path: Path
    max_abs_diff: float


@dataclass(frozen=True)
class Parity:
    """How ONNX Runtime's logits compare with torch's on one sample."""

    max_abs_diff: float
    worst_ratio: float  # the largest |ort - torch| / (atol + rtol * scale); <= 1 passes
    class_flips: int  # samples whose clearly-separated top class differs
    samples: int

    @property
    def holds(self) -> bool:
        """Whether every logit is within tolerance and no clear prediction flips."""
        return self.worst_ratio <= 1 and self.class_flips == 0


def compare_logits(
    actual: np.ndarray, expected: np.ndarray, *, rtol: float = RTOL, atol: float = ATOL
) -> Parity:
    """Compare ``actual`` logits (ONNX Runtime) with ``expected`` (torch), as (N, classes)."""
    diff = np.abs(actual.astype(np.float64) - expected)
    scale = np.abs(expected.astype(np.float64)).max(axis=-1, keepdims=True)
    allowed = atol + rtol * scale
    flips = 0
    if expected.shape[-1] > 1:
        top2 = np.sort(expected, axis=-1)[..., -2:]
        clear = (top2[..., 1] - top2[..., 0]) > 2 * (atol + rtol * scale[..., 0] / 10)
        flips = int((clear & (actual.argmax(-1) != expected.argmax(-1))).sum())
    return Parity(
        max_abs_diff=float(diff.max()),
        worst_ratio=float((diff / allowed).max()),
        class_flips=flips,
        samples=len(expected),
    )


def export_onnx(
    model: nn.Module,
    sample: np.ndarray,
    path: Path | str,
    *,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> ExportResult:
    """Export ``model`` to ONNX and verify it.

    Args:
        model: The model, exported in eval mode on CPU.
        sample: Real inputs (N, *input_shape), used to trace and to compare outputs: floats
            (the graph's input is float32) or integer token ids (int64).
        path: Where to write the ``.onnx`` file.
        rtol: Allowed difference of a logit, relative to the largest of its sample.
        atol: Allowed absolute difference of a logit, on top of ``rtol``.

    Returns:
        The path and the measured difference.

    Raises:
        TrialFailed: The graph fails ``onnx.checker``, a logit differs from torch's by more
            than ``atol + rtol * scale``, or a clearly-separated prediction differs.
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
    parity = compare_logits(actual, expected, rtol=rtol, atol=atol)
    if not parity.holds:
        raise TrialFailed(
            f"ONNX outputs differ from torch: largest difference {parity.max_abs_diff:.2e}, "
            f"{parity.worst_ratio:.2f}x the allowed {atol:g} + {rtol:g} * (largest |logit| of "
            f"its sample); the "
            f"predicted class differs on {parity.class_flips} of {parity.samples} samples"
        )
    return ExportResult(path=path, max_abs_diff=parity.max_abs_diff)
