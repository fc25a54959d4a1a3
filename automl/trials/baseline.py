"""The baseline of a trained model: checked at load (:mod:`automl.trials.model_check`), then
measured beside every trial.

Each trial of a trained model's study exports (or takes from the stage cache) the unmodified
model and measures it in the same process, right after the trial's own model, at the trial's
serving batch and at the baseline's. On the CPU, the baseline at its batch and the trial's
graph then run in turn (:func:`automl.pipeline.latency.interleaved_per_sample`), and the
speedup is the ratio of those runs: two figures taken one after the other drift apart when the
load of a shared host changes between them (the same trial measured 8.31× in one benchmark run
and 3.55× in the next). No trial waits for another.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from automl.trials.stages import CachedStages, timed

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
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
    # The baseline at its batch and the trial at its own, per sample, run in turn (see
    # automl.pipeline.latency.interleaved_per_sample): the speedup is their ratio, where taken.
    interleaved_ms: tuple[float, float] | None = None

    def compare(self, metrics: dict[str, float]) -> dict[str, float]:
        """The metrics of a trial against this baseline."""
        per_sample = metrics["latency_per_sample_ms"]
        base, trial = self.interleaved_ms or (self.own_batch_per_sample_ms, per_sample)
        return {
            "speedup": base / trial,
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
    trial: tuple[float, float, float] | None,
    interleave: Callable[[Path], Sequence[float] | None],
) -> BaselineFigures:
    """The figures of the unmodified model of ``stages``, exported or taken from the cache.

    Args:
        stages: The trial's stages; the baseline shares their trained model and cache.
        batch_size: The baseline's serving batch.
        timings: Per-stage seconds; the baseline's work is added under ``baseline``.
        measure: (ONNX path, batch) → (validation accuracy, per-sample ms).
        trial: The trial's (accuracy, size in MB, per-sample ms) when it deploys the unmodified
            model: they are the baseline's at the trial's batch, measured once.
        interleave: The baseline's ONNX path → (its per-sample ms at its batch, the trial's),
            run in turn, or None where the backend cannot (the speedup is then a ratio of the
            figures measured one after the other).
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
        paired = None  # the unmodified model at the baseline's batch is the baseline itself
        if not (trial is not None and same):
            paired = interleave(quantized.path)
        if paired is not None:
            at_own_batch = paired[0]
        else:
            at_own_batch = at_trial_batch if same else measure(quantized.path, batch_size)[1]
    interleaved = None if paired is None else tuple(paired)
    return BaselineFigures(accuracy, size_mb, at_trial_batch, at_own_batch, batch_size, interleaved)
