"""The baseline of a trained model: checked at load (:mod:`automl.trials.model_check`), then
measured beside every trial.

Each trial of a trained model's study exports (or takes from the stage cache) the unmodified
model and measures it in the same process, right after the trial's own model, at the trial's
serving batch and at the baseline's. Speedups are then ratios of two figures measured side by
side, which a loaded host moves together, and no trial waits for another.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from automl.trials.stages import CachedStages, timed

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from automl.candidate import Candidate


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


def baseline_candidate(candidate: Candidate, batch_size: int) -> Candidate:
    """The unmodified model, deployed as the trial's baseline at ``batch_size``."""
    return replace(
        candidate, pruning_ratio=0.0, method="fp32", keep_fp32=0,
        batch_size=batch_size, finetune_epochs=0, finetune_lr=None, kd_alpha=0.0,
        graph_optimization="all",
    )  # fmt: skip


def is_unmodified(candidate: Candidate) -> bool:
    """Whether ``candidate`` deploys the unmodified model (at whatever batch)."""
    return (
        candidate.pruning_ratio == 0
        and candidate.quant_method.name == "fp32"
        and candidate.graph_optimization == "all"
    )


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
