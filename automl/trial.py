"""One trial end to end: candidate + target → a quantized ONNX artifact and its metrics."""

from __future__ import annotations

import json
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from automl.cache import content_key
from automl.candidate import TrainConfig
from automl.models import build_model
from automl.pipeline.evaluate import evaluate
from automl.pipeline.export import OPSET, ExportResult, export_onnx
from automl.pipeline.latency import LatencyBudget, check_measurable, measure_latency
from automl.pipeline.prune import PruneResult, prune
from automl.pipeline.quantize import STATIC_INT8_RECIPE, QuantizedModel, quantize
from automl.pipeline.train import train
from automl.targets import require_present

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from torch import nn

    from automl.cache import StageCache
    from automl.candidate import Candidate
    from automl.data import Dataset
    from automl.spec import Constraint
    from automl.targets import Target

# Latency metrics that are a quantile of the per-batch times.
_QUANTILE_OF = {"latency_p50_ms": 0.5, "latency_p90_ms": 0.9, "latency_p99_ms": 0.99}


@dataclass(frozen=True)
class TrialOutcome:
    """The deployable artifact, every metric, stage timings and the environment fingerprint."""

    artifact: Path
    metrics: dict[str, float]
    timings: dict[str, float]
    latency: dict
    env: dict
    history: dict
    reused: dict[str, bool]


def run_trial(
    candidate: Candidate,
    target: Target,
    data: Dataset,
    workdir: Path | str,
    *,
    seed: int = 0,
    threads: int = 1,
    cache: StageCache | None = None,
    constraints: Sequence[Constraint] = (),
) -> TrialOutcome:
    """Train, prune, fine-tune, export, quantize, evaluate and measure one candidate.

    With a ``cache``, trained weights, pruned and fine-tuned weights, and quantized graphs are
    reused when a previous trial produced them from the same inputs. Evaluation and latency
    are always run.

    Args:
        candidate: The point of the search space.
        target: Where latency is measured; its hardware must be present.
        data: The split dataset.
        workdir: Folder for the ONNX files of this trial.
        seed: Seed of initialisation, training and fine-tuning.
        threads: Torch threads for training.
        cache: Stage cache, or None to compute everything.
        constraints: The study's constraints; those on latency stop the timing of a candidate
            once its runs prove it infeasible (see :class:`LatencyBudget`).

    Returns:
        The quantized artifact and its metrics.

    Raises:
        TargetUnavailable: Before any work, when the target's hardware is absent.
        UnsupportedQuantization: The bit-width does not apply to this model, or cannot be
            timed on this host (checked before any work).
        TrialFailed: A stage could not produce a valid candidate.
    """
    require_present(target)
    check_measurable(target, candidate.bits)
    stages = _Stages(candidate, data, Path(workdir), seed, threads, _torch_device(target), cache)
    timings: dict[str, float] = {}
    with _timed(timings, "train"):
        trained, train_history = stages.train()
    with _timed(timings, "prune"):
        pruned = stages.prune(trained)
    with _timed(timings, "export"):
        hit = stages.cached_quantized()
        exported = None if hit else stages.export(pruned.model)
    with _timed(timings, "quantize"):
        quantized, onnx_diff = hit or stages.quantize(exported)
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
            quantized.path, target, data.x_test, candidate.batch_size,
            torch_model=pruned.model, bits=candidate.bits,
            budgets=latency_budgets(constraints, candidate.batch_size),
        )  # fmt: skip
    metrics = {
        "accuracy": evaluation.accuracy,
        "latency_p50_ms": latency.p50_ms,
        "latency_p90_ms": latency.p90_ms,
        "latency_p99_ms": latency.p99_ms,
        "latency_per_sample_ms": latency.per_sample_ms,
        "throughput_sps": latency.throughput_sps,
        "size_mb": quantized.size_bytes / 1e6,
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
            "train": list(train_history),
            "finetune": list(pruned.history),
            "confusion": [list(row) for row in evaluation.confusion],
            "onnx_max_abs_diff": onnx_diff,
        },
        reused=stages.reused,
    )


def latency_budgets(constraints: Sequence[Constraint], batch_size: int) -> list[LatencyBudget]:
    """The latency constraints among ``constraints`` as per-batch budgets at ``batch_size``."""
    budgets = []
    for c in constraints:
        if c.op == "<=" and c.metric in _QUANTILE_OF:
            budgets.append(LatencyBudget(c.bound, _QUANTILE_OF[c.metric]))
        elif c.op == "<=" and c.metric == "latency_per_sample_ms":  # the median per sample
            budgets.append(LatencyBudget(c.bound * batch_size, 0.5))
        elif c.op == ">=" and c.metric == "throughput_sps" and c.bound > 0:  # of the median
            budgets.append(LatencyBudget(1000 * batch_size / c.bound, 0.5))
    return budgets


@dataclass
class _Stages:
    """The model-building stages of one trial, each looked up in the cache first."""

    candidate: Candidate
    data: Dataset
    workdir: Path
    seed: int
    threads: int
    device: str
    cache: StageCache | None

    def __post_init__(self) -> None:
        c = self.candidate
        self.reused = {"train": False, "prune": False, "quantize": False}
        self.finetune = TrainConfig(
            epochs=c.finetune_epochs,
            lr=c.train.lr / 3,
            weight_decay=c.train.weight_decay,
            batch_size=c.train.batch_size,
        )
        self.train_key = content_key("train", c.arch, c.train, self.data.fingerprint, self.seed)
        self.prune_key = content_key("prune", self.train_key, c.pruning_ratio, self.finetune)
        int8_mode = c.int8_mode if c.bits == 8 else None
        self.quant_key = content_key(
            "quantize", self.prune_key, c.bits, int8_mode, OPSET, STATIC_INT8_RECIPE
        )

    def train(self) -> tuple[nn.Module, tuple[dict, ...]]:
        model = build_model(
            self.candidate.arch, self.data.input_shape, self.data.num_classes, seed=self.seed
        )
        cached = self._load("train", self.train_key)
        if cached is not None:
            model.load_state_dict(cached["state_dict"])
            return model.eval(), tuple(cached["history"])
        result = train(
            model, self.data, self.candidate.train,
            seed=self.seed, device=self.device, threads=self.threads,
        )  # fmt: skip
        self._save("train", self.train_key, {"state_dict": result.model.state_dict(),
                                             "history": list(result.history)})  # fmt: skip
        return result.model, result.history

    def prune(self, trained: nn.Module) -> PruneResult:
        cached = self._load("prune", self.prune_key)
        if cached is not None:
            # Pruning is deterministic and cheap: redo it to get the shapes, skip the fine-tune.
            shell = prune(trained, self.data, self.candidate.pruning_ratio, TrainConfig(epochs=0))
            shell.model.load_state_dict(cached["state_dict"])
            return PruneResult(**{**_fields(shell), "history": tuple(cached["history"])})
        result = prune(
            trained, self.data, self.candidate.pruning_ratio, self.finetune,
            seed=self.seed, device=self.device, threads=self.threads,
        )  # fmt: skip
        self._save("prune", self.prune_key, {"state_dict": result.model.state_dict(),
                                             "history": list(result.history)})  # fmt: skip
        return result

    def cached_quantized(self) -> tuple[QuantizedModel, float] | None:
        if self.cache is None:
            return None
        onnx_path = self.cache.get("quantize", self.quant_key, ".onnx")
        meta_path = self.cache.get("quantize", self.quant_key, ".json")
        if onnx_path is None or meta_path is None:
            return None
        try:
            meta = json.loads(meta_path.read_text())
            self.workdir.mkdir(parents=True, exist_ok=True)
            out = shutil.copyfile(onnx_path, self.workdir / "model.onnx")
        except (OSError, ValueError):
            return None  # evicted meanwhile or unreadable: recompute
        self.reused["quantize"] = True
        return QuantizedModel(path=out, **meta["quantized"]), meta["onnx_max_abs_diff"]

    def export(self, model: nn.Module) -> ExportResult:
        return export_onnx(model, self.data.x_test[:64], self.workdir / "model-fp32.onnx")

    def quantize(self, exported: ExportResult) -> tuple[QuantizedModel, float]:
        quantized = quantize(
            exported.path, self.workdir / "model.onnx", self.candidate.bits,
            calibration=self.data.x_calib, int8_mode=self.candidate.int8_mode,
        )  # fmt: skip
        if self.cache is not None:
            meta = {k: v for k, v in asdict(quantized).items() if k != "path"}
            meta_file = self.workdir / "quantized.json"
            meta_file.write_text(
                json.dumps({"quantized": meta, "onnx_max_abs_diff": exported.max_abs_diff})
            )
            self.cache.put("quantize", self.quant_key, ".onnx", quantized.path)
            self.cache.put("quantize", self.quant_key, ".json", meta_file)
        return quantized, exported.max_abs_diff

    def _load(self, kind: str, key: str) -> dict | None:
        path = self.cache.get(kind, key, ".pt") if self.cache is not None else None
        if path is None:
            return None
        try:
            entry = torch.load(path, weights_only=True)
        except (OSError, RuntimeError, EOFError):
            return None  # evicted or unreadable: recompute
        self.reused[kind] = True
        return entry

    def _save(self, kind: str, key: str, entry: dict) -> None:
        if self.cache is None:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        tmp = self.workdir / f"{kind}.pt"
        torch.save(entry, tmp)
        self.cache.put(kind, key, ".pt", tmp)


def _fields(result: PruneResult) -> dict:
    """Field values of a frozen dataclass without deep-copying the model."""
    return {name: getattr(result, name) for name in result.__dataclass_fields__}


def _torch_device(target: Target) -> str:
    if target.kind == "cuda" and torch.cuda.is_available():
        return "cuda"
    return "cpu"


@contextmanager
def _timed(timings: dict[str, float], stage: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] = time.perf_counter() - start
