"""One trial end to end: candidate + target → a quantized ONNX artifact and its metrics."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from automl.candidate import TrainConfig
from automl.models import build_model
from automl.pipeline.evaluate import evaluate
from automl.pipeline.export import export_onnx
from automl.pipeline.latency import measure_latency
from automl.pipeline.prune import prune
from automl.pipeline.quantize import quantize
from automl.pipeline.train import train
from automl.targets import require_present

if TYPE_CHECKING:
    from collections.abc import Iterator

    from automl.candidate import Candidate
    from automl.data import Dataset
    from automl.targets import Target


@dataclass(frozen=True)
class TrialOutcome:
    """The deployable artifact, every metric, stage timings and the environment fingerprint."""

    artifact: Path
    metrics: dict[str, float]
    timings: dict[str, float]
    latency: dict
    env: dict
    history: dict


def run_trial(
    candidate: Candidate,
    target: Target,
    data: Dataset,
    workdir: Path | str,
    *,
    seed: int = 0,
    threads: int = 1,
) -> TrialOutcome:
    """Train, prune, fine-tune, export, quantize, evaluate and measure one candidate.

    Args:
        candidate: The point of the search space.
        target: Where latency is measured; its hardware must be present.
        data: The split dataset.
        workdir: Folder for the ONNX files of this trial.
        seed: Seed of training and fine-tuning.
        threads: Torch threads for training.

    Returns:
        The quantized artifact and its metrics.

    Raises:
        TargetUnavailable: Before any work, when the target's hardware is absent.
        UnsupportedQuantization: The bit-width does not apply to this model.
        TrialFailed: A stage could not produce a valid candidate.
    """
    require_present(target)
    workdir = Path(workdir)
    device = _torch_device(target)
    timings: dict[str, float] = {}
    with _timed(timings, "train"):
        model = build_model(candidate.arch, data.input_shape, data.num_classes, seed=seed)
        trained = train(model, data, candidate.train, seed=seed, device=device, threads=threads)
    with _timed(timings, "prune"):
        finetune = TrainConfig(
            epochs=candidate.finetune_epochs,
            lr=candidate.train.lr / 3,
            weight_decay=candidate.train.weight_decay,
            batch_size=candidate.train.batch_size,
        )
        pruned = prune(
            trained.model, data, candidate.pruning_ratio, finetune,
            seed=seed, device=device, threads=threads,
        )  # fmt: skip
    with _timed(timings, "export"):
        exported = export_onnx(pruned.model, data.x_test[:64], workdir / "model-fp32.onnx")
    with _timed(timings, "quantize"):
        quantized = quantize(
            exported.path,
            workdir / "model.onnx",
            candidate.bits,
            calibration=data.x_calib,
            int8_mode=candidate.int8_mode,
        )
    with _timed(timings, "evaluate"):
        evaluation = evaluate(
            quantized.path,
            data.x_test,
            data.y_test,
            num_classes=data.num_classes,
            providers=target.execution_providers,
            intra_op_threads=target.intra_op_threads,
            batch_size=candidate.batch_size,  # dynamic int8 scales depend on the batch
        )
    with _timed(timings, "latency"):
        latency = measure_latency(
            quantized.path, target, data.x_test, candidate.batch_size, torch_model=pruned.model
        )
    size_mb = quantized.size_bytes / 1e6
    metrics = {
        "accuracy": evaluation.accuracy,
        "latency_p50_ms": latency.p50_ms,
        "latency_p90_ms": latency.p90_ms,
        "latency_p99_ms": latency.p99_ms,
        "latency_per_sample_ms": latency.per_sample_ms,
        "throughput_sps": latency.throughput_sps,
        "size_mb": size_mb,
        "params": float(pruned.params_after),
        "macs": float(pruned.macs_after),
        "params_unpruned": float(pruned.params_before),
        "macs_unpruned": float(pruned.macs_before),
    }
    return TrialOutcome(
        artifact=quantized.path,
        metrics=metrics,
        timings=timings,
        latency={**latency.as_dict(), "method": quantized.method},
        env=latency.env,
        history={
            "train": list(trained.history),
            "finetune": list(pruned.history),
            "confusion": [list(row) for row in evaluation.confusion],
            "onnx_max_abs_diff": exported.max_abs_diff,
        },
    )


def _torch_device(target: Target) -> str:
    if target.kind == "cuda":
        import torch

        if torch.cuda.is_available():
            return "cuda"
    return "cpu"


@contextmanager
def _timed(timings: dict[str, float], stage: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] = time.perf_counter() - start
