"""The baseline of a trained model: checked at load, then measured beside every trial.

Each trial of a trained model's study exports (or takes from the stage cache) the unmodified
model and measures it in the same process, right after the trial's own model, at the trial's
serving batch and at the baseline's. Speedups are then ratios of two figures measured side by
side, which a loaded host moves together, and no trial waits for another.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from automl.data import cached_dataset
from automl.errors import SpecError
from automl.pipeline.export import export_onnx
from automl.trained_model import TrainedModel, open_trained
from automl.trials.stages import CachedStages, timed

if TYPE_CHECKING:
    from collections.abc import Callable

    from automl.candidate import Candidate
    from automl.data import Dataset
    from automl.search.spec import StudySpec


@dataclass(frozen=True)
class BaselineFigures:
    """The unmodified model's validation accuracy, size, and per-sample latency at two batches."""

    accuracy: float
    size_mb: float
    per_sample_ms: float  # at the trial's serving batch
    own_batch_per_sample_ms: float  # at the baseline's serving batch
    batch_size: int

    def compare(self, metrics: dict[str, float]) -> dict[str, float]:
        """The metrics of a trial against this baseline."""
        per_sample = metrics["latency_per_sample_ms"]
        return {
            "speedup": self.own_batch_per_sample_ms / per_sample,
            "speedup_same_batch": self.per_sample_ms / per_sample,
            "accuracy_drop": self.accuracy - metrics["accuracy"],
            "size_ratio": metrics["size_mb"] / self.size_mb,
        }


def check_study_model(spec: StudySpec) -> None:
    """Check a trained model's study before it is created (see :func:`check_trained_model`);
    a study that trains its own models passes."""
    if spec.model is not None:
        check_trained_model(spec, cached_dataset(spec.dataset, spec.seed, spec.standardizes))


def check_trained_model(spec: StudySpec, data: Dataset) -> TrainedModel:
    """Load the study's trained model and export it once, before any trial.

    Raises:
        SpecError: The weights are missing, unreadable or do not fit the factory's model, the
            model does not take the data or give one logit per class, or it cannot be
            exported to ONNX. One line, naming the factory.
    """
    assert spec.model is not None
    trained = open_trained(spec.model.factory, spec.model.weights, spec.model.output_layer)
    model = trained.build()
    name = spec.model.factory
    if trained.output_layer not in dict(model.named_modules()):
        raise SpecError(
            f"model {name!r} has no layer {trained.output_layer!r} giving its logits (its "
            f"top-level layers: {[n for n, _ in model.named_children()]}); name it with "
            "model.output_layer, which pruning keeps whole"
        )
    try:
        import torch

        with torch.no_grad():
            out = model(torch.from_numpy(data.x_val[:2]))
    except Exception as e:  # the user's forward
        raise SpecError(
            f"model {name!r} cannot run on the data (samples of shape {data.input_shape}): "
            f"{type(e).__name__}: {e}"
        ) from None
    if tuple(out.shape) != (min(2, len(data.x_val)), data.num_classes):
        raise SpecError(
            f"model {name!r} gives outputs of shape {tuple(out.shape)[1:]} per sample; the data "
            f"has {data.num_classes} classes, so it must give ({data.num_classes},) logits"
        )
    with tempfile.TemporaryDirectory(prefix="automl-check-") as tmp:
        try:
            export_onnx(model, data.x_val[:8], Path(tmp) / "model.onnx")
        except Exception as e:  # TrialFailed, or the exporter's own errors
            raise SpecError(
                f"model {name!r} cannot be exported to ONNX: {type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}"
            ) from None
    return trained


def baseline_candidate(candidate: Candidate, batch_size: int) -> Candidate:
    """The unmodified model, deployed as the trial's baseline at ``batch_size``."""
    return replace(
        candidate, pruning_ratio=0.0, method="fp32", bits=32, int8_mode="static",
        batch_size=batch_size, finetune_epochs=0, finetune_lr=None, kd_alpha=0.0,
    )  # fmt: skip


def is_unmodified(candidate: Candidate) -> bool:
    """Whether ``candidate`` deploys the unmodified model (at whatever batch)."""
    return candidate.pruning_ratio == 0 and candidate.quant_method.name == "fp32"


def measure_baseline(
    stages: CachedStages,
    batch_size: int,
    timings: dict[str, float],
    measure: Callable[[Path, int], tuple[float, float]],
    trial: tuple[float, float, float] | None = None,
) -> BaselineFigures:
    """The figures of the unmodified model of ``stages``, exported or taken from the cache.

    Args:
        stages: The trial's stages; the baseline shares their trained model and cache.
        batch_size: The baseline's serving batch.
        timings: Per-stage seconds; the baseline's work is added under ``baseline``.
        measure: (ONNX path, batch) → (validation accuracy, per-sample ms).
        trial: The trial's (accuracy, size in MB, per-sample ms) when it deploys the unmodified
            model: they are the baseline's at the trial's batch, measured once.
    """
    own = replace(
        stages,
        candidate=baseline_candidate(stages.candidate, batch_size),
        workdir=stages.workdir / "baseline",
    )
    trial_batch = stages.candidate.batch_size
    timings.setdefault("baseline", 0.0)
    with timed(timings, "baseline"):
        quantized, _, _ = own.quantized(dict.fromkeys(timings, 0.0))
        if trial is None:
            accuracy, at_trial_batch = measure(quantized.path, trial_batch)
            size_mb = quantized.size_bytes / 1e6
        else:
            accuracy, size_mb, at_trial_batch = trial
        same = batch_size == trial_batch
        at_own_batch = at_trial_batch if same else measure(quantized.path, batch_size)[1]
    return BaselineFigures(accuracy, size_mb, at_trial_batch, at_own_batch, batch_size)
