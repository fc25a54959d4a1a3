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
from automl.pipeline._ort import make_session
from automl.pipeline.evaluate import evaluate
from automl.pipeline.export import OPSET, ExportResult, export_onnx
from automl.pipeline.latency import (
    LatencyBudget,
    check_measurable,
    measure_latency,
    times_with_torch,
)
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

STAGES = ("train", "prune", "export", "quantize", "evaluate", "latency")
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

    With a ``cache``, trained weights, pruned and fine-tuned weights, fp32 graphs and quantized
    graphs are reused when a previous trial produced them from the same inputs; a trial whose
    graph is cached builds no torch model. Evaluation and latency are always run.

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
    timings = dict.fromkeys(STAGES, 0.0)
    quantized, onnx_diff, built = stages.quantized(timings)
    with _timed(timings, "evaluate"):
        session = make_session(quantized.path, target.execution_providers, target.intra_op_threads)
        evaluation = evaluate(
            session,
            data.x_test,
            data.y_test,
            num_classes=data.num_classes,
            batch_size=candidate.batch_size,  # dynamic int8 scales depend on the batch
        )
    torch_model = stages.pruned(timings)[0].model if times_with_torch(target) else None
    with _timed(timings, "latency"):
        latency = measure_latency(
            session, target, data.x_test, candidate.batch_size,
            torch_model=torch_model, bits=candidate.bits, **_warm_up_after(data, candidate),
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
        "params": float(built["params_after"]),
        "macs": float(built["macs_after"]),
        "params_unpruned": float(built["params_before"]),
        "macs_unpruned": float(built["macs_before"]),
    }
    return TrialOutcome(
        artifact=quantized.path,
        metrics=metrics,
        timings=timings,
        latency={**latency.as_dict(), "method": quantized.method},
        env=latency.env,
        history={
            "train": built["train"],
            "finetune": built["finetune"],
            "confusion": [list(row) for row in evaluation.confusion],
            "onnx_max_abs_diff": onnx_diff,
        },
        reused=stages.reused,
    )


def _warm_up_after(data: Dataset, candidate: Candidate) -> dict[str, int]:
    """Warm-up left for the session that evaluated the model: one run, if a batch was full.

    Evaluation ran the test set at the serving batch, and only its last batch may be shorter.
    """
    return {"warmup_runs": 1} if len(data.x_test) >= candidate.batch_size else {}


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
    """The model-building stages of one trial, each looked up in the cache first.

    The first stage found cached, from the last one back, is where the work starts: a trial
    whose quantized graph is cached builds no torch model at all. Each ONNX entry carries the
    model's summary (``_summary``), so the trial records it all the same.
    """

    candidate: Candidate
    data: Dataset
    workdir: Path
    seed: int
    threads: int
    device: str
    cache: StageCache | None

    def __post_init__(self) -> None:
        c = self.candidate
        self.reused = dict.fromkeys(("train", "prune", "export", "quantize"), False)
        self.finetune = TrainConfig(
            epochs=c.finetune_epochs,
            lr=c.train.lr / 3,
            weight_decay=c.train.weight_decay,
            batch_size=c.train.batch_size,
        )
        self.train_key = content_key("train", c.arch, c.train, self.data.fingerprint, self.seed)
        self.prune_key = content_key("prune", self.train_key, c.pruning_ratio, self.finetune)
        self.export_key = content_key("export", self.prune_key, OPSET)
        int8_mode = c.int8_mode if c.bits == 8 else None
        self.quant_key = content_key(
            "quantize", self.prune_key, c.bits, int8_mode, OPSET, STATIC_INT8_RECIPE
        )
        self._pruned: tuple[PruneResult, dict] | None = None

    def quantized(self, timings: dict[str, float]) -> tuple[QuantizedModel, float, dict]:
        """The quantized graph, its export's difference from torch, and the model's summary."""
        with _timed(timings, "quantize"):
            hit = self._cached_onnx("quantize", self.quant_key, "model.onnx")
        if hit is not None:
            path, meta = hit
            self._reuse("train", "prune", "export", "quantize")
            return (
                QuantizedModel(path=path, **meta["quantized"]),
                meta["max_abs_diff"],
                meta["model"],
            )
        exported, built = self._exported(timings)
        with _timed(timings, "quantize"):
            quantized = quantize(
                exported.path, self.workdir / "model.onnx", self.candidate.bits,
                calibration=self.data.x_calib, int8_mode=self.candidate.int8_mode,
            )  # fmt: skip
            meta = {k: v for k, v in asdict(quantized).items() if k != "path"}
            self._put_onnx("quantize", self.quant_key, quantized.path,
                           {"quantized": meta, "max_abs_diff": exported.max_abs_diff,
                            "model": built})  # fmt: skip
        return quantized, exported.max_abs_diff, built

    def _exported(self, timings: dict[str, float]) -> tuple[ExportResult, dict]:
        """The fp32 ONNX graph and the model's summary; built from the torch model on a miss."""
        with _timed(timings, "export"):
            hit = self._cached_onnx("export", self.export_key, "model-fp32.onnx")
        if hit is not None:
            self._reuse("train", "prune", "export")
            return ExportResult(hit[0], hit[1]["max_abs_diff"]), hit[1]["model"]
        pruned, built = self.pruned(timings)
        with _timed(timings, "export"):
            exported = export_onnx(
                pruned.model, self.data.x_test[:64], self.workdir / "model-fp32.onnx"
            )
            self._put_onnx("export", self.export_key, exported.path,
                           {"max_abs_diff": exported.max_abs_diff, "model": built})  # fmt: skip
        return exported, built

    def pruned(self, timings: dict[str, float]) -> tuple[PruneResult, dict]:
        """The pruned, fine-tuned torch model and its summary, built once."""
        if self._pruned is None:
            with _timed(timings, "train"):
                trained, history = self._train()
            with _timed(timings, "prune"):
                pruned = self._prune(trained)
            self._pruned = pruned, _summary(pruned, history)
        return self._pruned

    def _train(self) -> tuple[nn.Module, tuple[dict, ...]]:
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

    def _prune(self, trained: nn.Module) -> PruneResult:
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

    def _reuse(self, *kinds: str) -> None:
        self.reused.update(dict.fromkeys(kinds, True))

    def _cached_onnx(self, kind: str, key: str, name: str) -> tuple[Path, dict] | None:
        """A cached graph, copied into the workdir as ``name``, and its metadata."""
        if self.cache is None:
            return None
        onnx_path = self.cache.get(kind, key, ".onnx")
        meta_path = self.cache.get(kind, key, ".json")
        if onnx_path is None or meta_path is None:
            return None
        try:
            meta = json.loads(meta_path.read_text())
            if not {"max_abs_diff", "model"} <= meta.keys():
                return None  # written by an older version: recompute
            self.workdir.mkdir(parents=True, exist_ok=True)
            return shutil.copyfile(onnx_path, self.workdir / name), meta
        except (OSError, ValueError, AttributeError):
            return None  # evicted meanwhile or unreadable: recompute

    def _put_onnx(self, kind: str, key: str, onnx_path: Path, meta: dict) -> None:
        if self.cache is None:
            return
        meta_file = self.workdir / f"{kind}.json"
        meta_file.write_text(json.dumps(meta))
        # The graph first: a reader that finds the metadata finds the graph.
        self.cache.put(kind, key, ".onnx", onnx_path)
        self.cache.put(kind, key, ".json", meta_file)

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


def _summary(pruned: PruneResult, train_history: tuple[dict, ...]) -> dict:
    """What a trial records of its torch model: sizes before and after pruning, histories."""
    return {
        "macs_before": pruned.macs_before,
        "params_before": pruned.params_before,
        "macs_after": pruned.macs_after,
        "params_after": pruned.params_after,
        "train": list(train_history),
        "finetune": list(pruned.history),
    }


def _fields(result: PruneResult) -> dict:
    """Field values of a frozen dataclass without deep-copying the model."""
    return {name: getattr(result, name) for name in result.__dataclass_fields__}


def _torch_device(target: Target) -> str:
    if target.kind == "cuda" and torch.cuda.is_available():
        return "cuda"
    return "cpu"


@contextmanager
def _timed(timings: dict[str, float], stage: str) -> Iterator[None]:
    """Add the time the block takes to ``timings[stage]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] += time.perf_counter() - start
