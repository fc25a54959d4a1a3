"""Evaluate stage: top-1 accuracy and confusion matrix of an ONNX artifact, run in ONNX Runtime."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from automl.catalog.runtimes._ort import feed, input_dtype, input_name, open_session
from automl.errors import SpecError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    import onnxruntime as ort


@dataclass(frozen=True)
class Evaluation:
    """Accuracy of a model on a labelled set.

    Attributes:
        accuracy: Top-1 accuracy in [0, 1].
        confusion: ``confusion[true][pred]`` counts, ``num_classes`` × ``num_classes``.
        n: Number of samples evaluated.
    """

    accuracy: float
    confusion: tuple[tuple[int, ...], ...]
    n: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, e.g. for an Optuna user attr."""
        return {
            "accuracy": self.accuracy,
            "confusion": [list(row) for row in self.confusion],
            "n": self.n,
        }


def evaluate(
    model: Path | str | ort.InferenceSession,
    x: np.ndarray,
    y: np.ndarray,
    *,
    num_classes: int,
    providers: Sequence[str] = ("CPUExecutionProvider",),
    intra_op_threads: int = 1,
    batch_size: int = 256,
) -> Evaluation:
    """Run the ONNX model over ``x`` in batches and score its top-1 predictions against ``y``.

    Args:
        model: The ONNX artifact, or a session of it; its single input takes ``x``, its first
            output is logits ``(N, num_classes)``.
        x: Inputs ``(N, *input_shape)``: floats, cast to the model input's float type, or
            integer token ids for an int64 input.
        y: Integer labels ``(N,)`` in ``[0, num_classes)``.
        num_classes: Number of classes; the size of the confusion matrix.
        providers: ONNX Runtime execution providers in order of preference.
        intra_op_threads: Intra-op thread count (0 lets ORT choose).
        batch_size: Samples per ``session.run`` call.

    Returns:
        Accuracy, confusion matrix and sample count.

    Raises:
        SpecError: ``x`` and ``y`` differ in length, the set is empty, a label is out of range,
            ``batch_size`` is not positive, the model's logits do not have ``num_classes``
            columns, or ``x`` is float and the model takes token ids (or the reverse).
    """
    labels = np.asarray(y).astype(np.int64, copy=False).reshape(-1)
    if len(x) != len(labels):
        raise SpecError(f"x has {len(x)} samples but y has {len(labels)} labels")
    if len(labels) == 0:
        raise SpecError("cannot evaluate on an empty set")
    if labels.min() < 0 or labels.max() >= num_classes:
        raise SpecError(
            f"labels must lie in [0, {num_classes}), got {labels.min()}..{labels.max()}"
        )
    if batch_size < 1:
        raise SpecError(f"batch_size must be positive, got {batch_size}")

    session = open_session(model, providers, intra_op_threads)
    name = input_name(session)
    dtype = input_dtype(session)
    predictions = []
    for start in range(0, len(labels), batch_size):
        logits = session.run(None, {name: feed(x[start : start + batch_size], dtype)})[0]
        if logits.ndim != 2 or logits.shape[1] != num_classes:
            raise SpecError(
                f"model outputs logits of shape {logits.shape}, expected (batch, {num_classes})"
            )
        predictions.append(np.argmax(logits, axis=1))

    predicted = np.concatenate(predictions)
    confusion = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(confusion, (labels, predicted), 1)
    return Evaluation(
        accuracy=float(np.trace(confusion) / len(labels)),
        confusion=tuple(tuple(int(c) for c in row) for row in confusion),
        n=len(labels),
    )
